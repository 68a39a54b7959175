// Capturable optimizers (Optimizer::set_capturable): the learning rate and the step count live in
// a small tensor that the step's kernels read, so that a CUDA graph replays the values of the
// moment. The CPU runs the same path (its kernels read that memory too), so here: its steps equal
// the usual ones bit for bit while the learning rate changes every step, the kernels really take
// the values from memory, and the counts survive state_dict / load_state_dict / switching back.
#include <functional>

#include "backend/backend.h"
#include "support/test_util.h"

namespace gradus {
namespace {

using testing::fresh_seed;
using testing::random_tensor;
using testing::values_of;

std::vector<Tensor> make_params(uint64_t seed) {
  std::vector<Tensor> ps = {random_tensor({7, 5}, seed, -1, 1, DType::f32),
                            random_tensor({5}, seed + 1, -1, 1, DType::f32),
                            random_tensor({3, 4}, seed + 2, -1, 1, DType::f64)};
  for (Tensor& p : ps) p.set_requires_grad(true);
  return ps;
}

// Gives every parameter a fresh gradient for step `step` (the same for both runs).
void set_grads(const std::vector<Tensor>& ps, uint64_t seed, int step) {
  for (size_t i = 0; i < ps.size(); ++i) {
    ps[i].set_grad(random_tensor(ps[i].sizes(), seed + 100 * static_cast<uint64_t>(step) + i, -1, 1,
                                 ps[i].dtype()));
  }
}

template <typename Opt, typename Options>
std::vector<std::vector<double>> train(Options options, bool capturable, int steps, uint64_t seed,
                                       const std::function<void(Opt&)>& after = nullptr) {
  const std::vector<Tensor> ps = make_params(seed);
  Opt opt(ps, options);
  if (capturable) opt.set_capturable(true);
  for (int s = 0; s < steps; ++s) {
    opt.set_lr(options.lr * (1.0 + 0.25 * s));  // changes every step
    set_grads(ps, seed, s);
    opt.step();
  }
  if (after) after(opt);
  std::vector<std::vector<double>> out;
  for (const Tensor& p : ps) out.push_back(values_of(p));
  for (size_t i = 0; i < ps.size(); ++i) {
    for (const auto& [name, t] : opt.state(0, i).tensors) out.push_back(values_of(t));
  }
  return out;
}

TEST(CapturableOptimizers, StepsEqualTheUsualOnesBitwise) {
  const uint64_t seed = fresh_seed();
  const optim::AdamOptions adam{.lr = 1e-2, .weight_decay = 0.01};
  EXPECT_EQ((train<optim::Adam>(adam, true, 6, seed)), (train<optim::Adam>(adam, false, 6, seed)));
  const optim::AdamOptions ams{.lr = 1e-2, .amsgrad = true};
  EXPECT_EQ((train<optim::Adam>(ams, true, 6, seed)), (train<optim::Adam>(ams, false, 6, seed)));
  const optim::AdamWOptions adamw{.lr = 1e-2, .weight_decay = 0.1};
  EXPECT_EQ((train<optim::AdamW>(adamw, true, 6, seed)),
            (train<optim::AdamW>(adamw, false, 6, seed)));
  const optim::SGDOptions sgd{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true};
  EXPECT_EQ((train<optim::SGD>(sgd, true, 6, seed)), (train<optim::SGD>(sgd, false, 6, seed)));
  // The runs moved the weights, so the comparison above compared something.
  const std::vector<Tensor> initial = make_params(seed);
  EXPECT_NE(values_of(initial[0]), (train<optim::Adam>(adam, true, 6, seed))[0]);
}

// The kernels take {lr, step} from memory: garbage in the host arguments changes nothing.
TEST(CapturableOptimizers, TheKernelsReadTheLearningRateAndStepFromMemory) {
  const uint64_t seed = fresh_seed();
  backend::Backend& cpu = backend::backend_for(DeviceType::CPU);
  auto adam_once = [&](bool from_memory) {
    const Tensor p = random_tensor({40}, seed, -1, 1, DType::f32);
    const Tensor g = random_tensor({40}, seed + 1, -1, 1, DType::f32);
    const Tensor m = random_tensor({40}, seed + 2, -0.1, 0.1, DType::f32);
    const Tensor v = random_tensor({40}, seed + 3, 0, 0.1, DType::f32);
    const double scalars[2] = {3e-3, 4.0};
    backend::AdamArgs a;
    a.weight_decay = 0.05;
    a.decoupled_weight_decay = true;
    if (from_memory) {
      a.lr = std::nan("");
      a.step = 1000;
      a.device_scalars = scalars;
    } else {
      a.lr = scalars[0];
      a.step = 4;
    }
    cpu.adam_step({p}, {g}, {m}, {v}, {}, a);
    return values_of(p);
  };
  EXPECT_EQ(adam_once(true), adam_once(false));
  auto sgd_once = [&](bool from_memory) {
    const Tensor p = random_tensor({40}, seed, -1, 1, DType::f64);
    const Tensor g = random_tensor({40}, seed + 1, -1, 1, DType::f64);
    const double scalars[2] = {0.07, 1.0};
    backend::SgdArgs a;
    a.lr = from_memory ? std::nan("") : scalars[0];
    if (from_memory) a.device_scalars = scalars;
    cpu.sgd_step({p}, {g}, {}, a);
    return values_of(p);
  };
  EXPECT_EQ(sgd_once(true), sgd_once(false));
}

TEST(CapturableOptimizers, StepCountsSurviveStateDictAndSwitchingBack) {
  const uint64_t seed = fresh_seed();
  const optim::AdamOptions o{.lr = 1e-2};
  optim::OptimizerState saved;
  train<optim::Adam>(o, true, 5, seed, [&](optim::Adam& opt) {
    saved = opt.state_dict();  // counts read from the optimizer's memory
    for (size_t i = 0; i < 3; ++i)
      EXPECT_EQ(saved.scalars.at("state." + std::to_string(i) + ".step"), 5.0);
    opt.set_capturable(false);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(opt.state(0, i).step, 5);
    opt.set_capturable(true);  // and on again, from the host's counts
    set_grads(opt.params(0), seed, 5);
    opt.step();
    EXPECT_EQ(opt.state_dict().scalars.at("state.0.step"), 6.0);
  });
  // Loaded into a capturable optimizer, the counts and moments carry on exactly as without it.
  auto resumed = [&](bool capturable) {
    const std::vector<Tensor> ps = make_params(seed + 7);
    optim::Adam opt(ps, o);
    if (capturable) opt.set_capturable(true);
    opt.load_state_dict(saved);
    for (int s = 5; s < 8; ++s) {
      set_grads(ps, seed, s);
      opt.step();
    }
    std::vector<std::vector<double>> out;
    for (const Tensor& p : ps) out.push_back(values_of(p));
    out.push_back({opt.state_dict().scalars.at("state.2.step")});
    return out;
  };
  const auto a = resumed(true), b = resumed(false);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.back(), std::vector<double>{8.0});
}

TEST(CapturableOptimizers, RefusesAGroupWhoseParametersAreAtDifferentSteps) {
  const std::vector<Tensor> ps = make_params(fresh_seed());
  optim::Adam opt(ps, {.lr = 1e-2});
  set_grads(ps, 1, 0);
  opt.step();
  ps[1].set_grad(Tensor());  // parameter 1 sits the second step out
  opt.step();
  try {
    opt.set_capturable(true);
    FAIL() << "a group at steps 2 and 1 was made capturable";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("group 0 are at different steps"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(opt.capturable());
}

}  // namespace
}  // namespace gradus
