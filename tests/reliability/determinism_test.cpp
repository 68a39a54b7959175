// Deterministic mode and what is bitwise reproducible on the CPU (docs/reliability.md,
// "Determinism"): the switch itself, and that training steps repeat bit for bit for a fixed seed
// and thread count.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gradus/core/determinism.h"
#include "gradus/gradus.h"
#include "gradus/nn/models.h"
#include "support/test_util.h"

namespace gradus {
namespace {

TEST(Determinism, SwitchAndGuard) {
  ASSERT_FALSE(is_deterministic());
  EXPECT_NO_THROW(check_deterministic_allowed("scatter_add (CUDA)"));
  {
    DeterministicGuard on;
    EXPECT_TRUE(is_deterministic());
    try {
      check_deterministic_allowed("scatter_add (CUDA)");
      ADD_FAILURE() << "check_deterministic_allowed did not throw in deterministic mode";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("scatter_add (CUDA)"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("deterministic mode is on"), std::string::npos);
    }
    {
      DeterministicGuard off(false);
      EXPECT_FALSE(is_deterministic());
      EXPECT_NO_THROW(check_deterministic_allowed("scatter_add (CUDA)"));
    }
    EXPECT_TRUE(is_deterministic());
  }
  EXPECT_FALSE(is_deterministic());
}

// The bits of every parameter after `steps` Adam steps of `model_name` on fixed random data.
std::vector<uint32_t> train_bits(const std::string& model_name, uint64_t seed, int steps) {
  manual_seed(seed);
  std::shared_ptr<nn::Module> model = nn::make_model(model_name);
  optim::Adam opt(model->parameters(), {.lr = 1e-2});
  const Tensor x = randn({16, 1, 28, 28});
  const Tensor y = randint(0, 10, {16});
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    cross_entropy((*model)(x), y).backward();
    opt.step();
  }
  std::vector<uint32_t> bits;
  for (const Tensor& p : model->parameters()) {
    const std::vector<float> v = p.to_vector<float>();
    const size_t at = bits.size();
    bits.resize(at + v.size());
    std::memcpy(bits.data() + at, v.data(), v.size() * sizeof(float));
  }
  return bits;
}

// Run to run on the CPU with the same seed and thread count: bitwise equal (GEMM, conv with
// per-thread partial sums merged in thread order, chunked reductions, batch norm, Adam).
TEST(Determinism, CpuTrainingStepsRepeatBitwise) {
  const uint64_t seed = testing::fresh_seed();
  const int threads = get_num_threads();
  for (const char* name : {"mlp", "cnn"}) {
    for (int t : {1, 2}) {
      set_num_threads(t);
      const std::vector<uint32_t> a = train_bits(name, seed, 3);
      const std::vector<uint32_t> b = train_bits(name, seed, 3);
      EXPECT_TRUE(a == b) << name << " with " << t << " threads, seed " << seed
                          << ": two identical runs differ";
    }
  }
  set_num_threads(threads);
}

}  // namespace
}  // namespace gradus
