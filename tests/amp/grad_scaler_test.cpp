// amp::GradScaler: PyTorch's scales on recorded overflow sequences (golden file written by
// torch.amp.GradScaler, tools/make_grad_scaler_golden.py), skipped steps leave parameters and
// optimizer state bitwise untouched, unscaling is exact, the state survives a checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "gradus/amp/amp.h"
#include "gradus/io/io.h"
#include "gradus/optim/optim.h"
#include "support/test_util.h"

namespace gradus::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Bitwise copies of tensors, for "unchanged" checks.
std::vector<std::vector<uint8_t>> bytes_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<uint8_t>> out;
  for (const Tensor& t : ts) {
    const Tensor c = t.contiguous();
    const uint8_t* p = static_cast<const uint8_t*>(c.raw_data());
    out.emplace_back(p, p + c.numel() * static_cast<int64_t>(c.element_size()));
  }
  return out;
}

std::vector<Tensor> state_tensors(const optim::Optimizer& opt) {
  std::vector<Tensor> out;
  for (const auto& [k, t] : opt.state_dict().tensors) out.push_back(t);
  return out;
}

TEST(GradScaler, ScalesMatchPyTorchOnRecordedOverflowSequences) {
  std::ifstream f(std::string(GRADUS_TEST_DATA_DIR) + "/golden/grad_scaler.json");
  ASSERT_TRUE(f.good());
  const nlohmann::json golden = nlohmann::json::parse(f);
  int steps_checked = 0;
  for (const auto& c : golden["cases"]) {
    const auto& o = c["options"];
    amp::GradScaler scaler({.init_scale = o["init_scale"].get<double>(),
                            .growth_factor = o["growth_factor"].get<double>(),
                            .backoff_factor = o["backoff_factor"].get<double>(),
                            .growth_interval = o["growth_interval"].get<int64_t>()});
    Tensor p = ones({4}).set_requires_grad();
    optim::SGD opt({p}, {.lr = 0.1});
    for (const auto& s : c["steps"]) {
      std::vector<double> g(4, 0.5);
      if (s["found"] == "inf") g[2] = kInf;
      if (s["found"] == "nan") g[1] = std::nan("");
      p.set_grad(from_vector(g, {4}, {.dtype = DType::f32}));
      const bool stepped = scaler.step(opt);
      scaler.update();
      EXPECT_EQ(stepped, s["stepped"].get<bool>()) << "step " << steps_checked;
      EXPECT_EQ(scaler.get_scale(), s["scale"].get<double>()) << "step " << steps_checked;
      EXPECT_EQ(scaler.growth_tracker(), s["growth_tracker"].get<int64_t>());
      ++steps_checked;
    }
  }
  EXPECT_EQ(steps_checked, 80);
}

// An inf in one gradient of one parameter: the step is skipped for all of them, the parameters and
// the Adam state stay bitwise as they were, and the scale halves.
TEST(GradScaler, OverflowSkipsTheStepAndLeavesEverythingUntouched) {
  const uint64_t seed = fresh_seed();
  Tensor a = random_tensor({7, 5}, seed, -1, 1, DType::f32).set_requires_grad();
  Tensor b = random_tensor({5}, seed + 1, -1, 1, DType::f32).set_requires_grad();
  optim::Adam opt({a, b}, {.lr = 1e-2});
  amp::GradScaler scaler({.init_scale = 1024.0});
  // One clean step, so Adam has state.
  scaler.scale(sum(mul(matmul(ones({2, 7}), a), b))).backward();
  ASSERT_TRUE(scaler.step(opt));
  scaler.update();
  const auto params_before = bytes_of({a, b});
  const auto state_before = bytes_of(state_tensors(opt));
  for (double bad : {kInf, -kInf, std::nan("")}) {
    opt.zero_grad();
    scaler.scale(sum(mul(matmul(ones({2, 7}), a), b))).backward();
    {
      NoGradGuard g;
      Tensor gb = b.grad();
      static_cast<float*>(gb.raw_data())[3] = static_cast<float>(bad);
    }
    const double scale_before = scaler.get_scale();
    EXPECT_FALSE(scaler.step(opt));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), scale_before * 0.5);
    EXPECT_EQ(bytes_of({a, b}), params_before);
    EXPECT_EQ(bytes_of(state_tensors(opt)), state_before);
  }
  EXPECT_EQ(scaler.skipped_steps(), 3);
}

// unscale_ divides every gradient by the scale (exactly, for a power of two), in f32, f64, f16 and
// bf16, and may be called once per optimizer and iteration (before clipping).
TEST(GradScaler, UnscaleIsExactAndOncePerIteration) {
  const uint64_t seed = fresh_seed();
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Tensor p = random_tensor({300}, seed, -1, 1, DType::f32).to(d).set_requires_grad();
    optim::SGD opt({p}, {.lr = 0.1});
    amp::GradScaler scaler({.init_scale = 256.0});
    const Tensor g = random_tensor({300}, seed + 1, -1, 1, DType::f32).to(d);
    p.set_grad(mul(g, 256.0));
    scaler.unscale_(opt);
    EXPECT_EQ(bytes_of({p.grad()}), bytes_of({g})) << dtype_name(d);
    EXPECT_THROW(scaler.unscale_(opt), ValueError);
    // (The CPU optimizers step float32/float64 parameters only.)
    if (d == DType::f32 || d == DType::f64) {
      EXPECT_TRUE(scaler.step(opt));  // no second unscale inside step
      EXPECT_EQ(bytes_of({p.grad()}), bytes_of({g})) << "unscaled twice";
    }
    scaler.update();
    scaler.unscale_(opt);  // a new iteration
  }
}

TEST(GradScaler, StateSurvivesACheckpointAndContinuesIdentically) {
  amp::GradScaler a(
      {.init_scale = 1000.0, .growth_factor = 1.5, .backoff_factor = 0.3, .growth_interval = 3});
  Tensor p = ones({4}).set_requires_grad();
  optim::SGD opt({p}, {.lr = 0.1});
  auto run = [&](amp::GradScaler& s, const std::vector<bool>& overflow) {
    std::vector<double> scales;
    for (bool bad : overflow) {
      p.set_grad(from_vector(std::vector<double>{0.5, bad ? kInf : 0.5, 0.5, 0.5}, {4},
                             {.dtype = DType::f32}));
      s.step(opt);
      s.update();
      scales.push_back(s.get_scale());
    }
    return scales;
  };
  run(a, {false, true, false, false});
  io::TrainingState st;
  st.scaler = a.state_dict();
  const std::string dir =
      ::testing::TempDir() + "/gradus_scaler_ck_" + std::to_string(fresh_seed());
  const std::string path = io::save_checkpoint(dir, 4, st);
  amp::GradScaler b;
  b.load_state_dict(io::load_checkpoint(path).scaler);
  EXPECT_EQ(b.get_scale(), a.get_scale());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  const std::vector<bool> rest = {false, false, true, false, false, false, false};
  EXPECT_EQ(run(b, rest), run(a, rest));
  std::filesystem::remove_all(dir);
}

TEST(GradScaler, DisabledIsAPassThroughAndBadOptionsAreRefused) {
  amp::GradScaler off({.enabled = false});
  Tensor p = ones({2}).set_requires_grad();
  optim::SGD opt({p}, {.lr = 0.5});
  const Tensor loss = sum(p);
  EXPECT_TRUE(off.scale(loss).same(loss));
  p.set_grad(from_vector(std::vector<double>{1, 1}, {2}, {.dtype = DType::f32}));
  EXPECT_TRUE(off.step(opt));
  EXPECT_EQ(p.to_vector<double>(), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(off.get_scale(), 1.0);
  EXPECT_THROW(amp::GradScaler({.init_scale = std::nan("")}), ValueError);
  EXPECT_THROW(amp::GradScaler({.growth_factor = 1.0}), ValueError);
  EXPECT_THROW(amp::GradScaler({.backoff_factor = 1.0}), ValueError);
  EXPECT_THROW(amp::GradScaler({.growth_interval = 0}), ValueError);
  amp::GradScaler s;
  EXPECT_THROW(s.load_state_dict({{"scale", 8.0}}), ValueError);
}

}  // namespace
}  // namespace gradus::testing
