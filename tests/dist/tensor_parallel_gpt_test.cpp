// The GPT split over the tensor-parallel ranks (dist::TensorParallelGPT) against nn::GPT built from
// the same seed, at every world size the dist suite runs (1-4 ranks), in float64.
#include <gtest/gtest.h>

#include <cmath>

#include "dist/dist_test_util.h"
#include "gradus/dist/tensor_parallel_gpt.h"
#include "gradus/optim/optim.h"

namespace gradus::testing {
namespace {

nn::GPTConfig small_config() {
  nn::GPTConfig c;
  c.vocab_size = 10;  // padded to 12 on 3 and 4 ranks, not on 1 and 2
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 12;  // divides over 1-4 ranks
  c.n_embd = 24;
  return c;
}

// Logits (this rank's columns), the loss, and through two SGD steps every weight (gathered),
// equal the one-device model's; the gathered state dict has nn::GPT's names and shapes, the
// generator is left where nn::GPT leaves it, and a full state dict loads back into the slices.
TEST(TensorParallelGPT, EqualsTheOneDeviceGPT) {
  const uint64_t seed = shared_seed();
  const nn::GPTConfig config = small_config();
  const int n = dist::world_size(), r = dist::rank();
  manual_seed(seed);
  dist::TensorParallelGPT tp(config);
  const PhiloxState after_tp = default_generator().state();
  tp.to(DType::f64);
  manual_seed(seed);
  nn::GPT ref(config);
  EXPECT_EQ(default_generator().state().offset, after_tp.offset);
  ref.to(DType::f64);
  const int64_t local = tp.padded_vocab / n;
  ASSERT_EQ(tp.padded_vocab, (config.vocab_size + n - 1) / n * n);

  optim::SGD opt_tp(tp.parameters(), {.lr = 0.5});
  optim::SGD opt_ref(ref.parameters(), {.lr = 0.5});
  for (int step = 0; step < 2; ++step) {
    const double top = static_cast<double>(config.vocab_size) - 0.01;
    const Tensor idx = floor(random_tensor({3, 8}, seed + step, 0, top)).to(DType::i64);
    const Tensor targets = floor(random_tensor({3, 8}, seed + 50 + step, 0, top)).to(DType::i64);
    opt_tp.zero_grad();
    opt_ref.zero_grad();
    const Tensor logits = tp(idx), logits_ref = ref(idx);
    ASSERT_EQ(logits.sizes(), (Shape{3, 8, local}));
    // This rank's real classes match; its padded ones are -inf.
    const int64_t first = r * local;
    const int64_t real = std::max<int64_t>(0, std::min(local, config.vocab_size - first));
    if (real > 0) {
      EXPECT_TRUE(
          all_close(logits.narrow(2, 0, real), logits_ref.narrow(2, first, real), 1e-12, 1e-12));
    }
    for (int64_t j = real; j < local; ++j) {
      const double most = max(logits.narrow(2, j, 1)).item();
      EXPECT_TRUE(std::isinf(most) && most < 0) << "padded class " << j;
    }
    const Tensor loss = tp.loss(logits, targets);
    const Tensor loss_ref =
        cross_entropy(logits_ref.reshape({-1, config.vocab_size}), targets.reshape({-1}));
    EXPECT_NEAR(loss.item(), loss_ref.item(), 1e-12);
    loss.backward();
    loss_ref.backward();
    opt_tp.step();
    opt_ref.step();
  }
  const nn::StateDict full = tp.full_state_dict();
  const nn::StateDict expected = ref.state_dict();
  EXPECT_EQ(full.keys(), expected.keys());
  for (const auto& [name, t] : expected) {
    ASSERT_NE(full.find(name), nullptr) << name;
    EXPECT_TRUE(all_close(*full.find(name), t, 1e-11, 1e-12)) << name;
  }
  // The full weights load back into another model's slices.
  dist::TensorParallelGPT other(config);
  other.to(DType::f64);
  other.load_full_state_dict(full);
  const nn::StateDict round_trip = other.full_state_dict();
  for (const auto& [name, t] : full) {
    EXPECT_TRUE(all_close(round_trip.at(name), t, 0, 0)) << name;
  }
  // Dropout is refused, and heads that do not divide.
  nn::GPTConfig dropped = config;
  dropped.dropout = 0.1;
  EXPECT_THROW(dist::TensorParallelGPT{dropped}, ValueError);
  if (n > 1) {
    nn::GPTConfig odd = config;
    odd.n_head = n + 1;
    odd.n_embd = 2 * odd.n_head;
    EXPECT_THROW(dist::TensorParallelGPT{odd}, ValueError);
  }
}

}  // namespace
}  // namespace gradus::testing
