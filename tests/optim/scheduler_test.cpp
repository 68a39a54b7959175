// LR schedulers against PyTorch's closed forms, written out here independently.
#include <cmath>
#include <numbers>

#include "support/test_util.h"

namespace gradus {
namespace {

std::vector<Tensor> one_param() {
  Tensor p = zeros({3});
  p.set_requires_grad(true);
  return {p};
}

// Checks epochs 0..n-1: after construction (epoch 0) and after each step().
template <typename Expected>
void check_schedule(optim::LRScheduler& sched, optim::Optimizer& opt, int n, Expected expected) {
  for (int e = 0; e < n; ++e) {
    if (e > 0) sched.step();
    ASSERT_EQ(sched.last_epoch(), e);
    ASSERT_EQ(sched.get_last_lr().size(), opt.num_param_groups());
    for (size_t g = 0; g < opt.num_param_groups(); ++g) {
      const double want = expected(e, g);
      EXPECT_NEAR(sched.get_last_lr()[g], want, 1e-15 + 1e-12 * std::abs(want))
          << sched.type_name() << " epoch " << e << " group " << g;
      EXPECT_DOUBLE_EQ(opt.group_lr(g), sched.get_last_lr()[g]);
    }
  }
}

TEST(Schedulers, StepMultiStepExponential) {
  auto ps = one_param();
  {
    optim::SGD opt(ps, {.lr = 0.1});
    optim::StepLR s(opt, 3, 0.5);
    check_schedule(s, opt, 12, [](int e, size_t) { return 0.1 * std::pow(0.5, e / 3); });
  }
  {
    optim::SGD opt(ps, {.lr = 0.2});
    optim::MultiStepLR s(opt, {8, 2, 5, 5}, 0.1);  // unsorted, 5 repeated (applies twice)
    check_schedule(s, opt, 11, [](int e, size_t) {
      int passed = (e >= 2) + 2 * (e >= 5) + (e >= 8);
      return 0.2 * std::pow(0.1, passed);
    });
  }
  {
    optim::Adam opt(ps, {.lr = 0.01});
    optim::ExponentialLR s(opt, 0.9);
    check_schedule(s, opt, 10, [](int e, size_t) { return 0.01 * std::pow(0.9, e); });
  }
}

TEST(Schedulers, CosineAndLinear) {
  auto ps = one_param();
  {
    optim::SGD opt(ps, {.lr = 0.1});
    optim::CosineAnnealingLR s(opt, 10, 0.001);
    check_schedule(s, opt, 25, [](int e, size_t) {
      return 0.001 + (0.1 - 0.001) * (1 + std::cos(std::numbers::pi * e / 10.0)) / 2;
    });
  }
  {
    optim::SGD opt(ps, {.lr = 0.3});
    optim::LinearLR s(opt);  // start 1/3, end 1, 5 iterations
    check_schedule(s, opt, 9, [](int e, size_t) {
      return 0.3 * (1.0 / 3 + (1 - 1.0 / 3) * std::min(e, 5) / 5.0);
    });
  }
  EXPECT_THROW(
      {
        optim::SGD opt(ps, {.lr = 0.1});
        optim::StepLR s(opt, 0);
      },
      ValueError);
}

TEST(Schedulers, LinearWarmupThenCosineForEachGroup) {
  auto ps = one_param();
  Tensor q = zeros({2});
  q.set_requires_grad(true);
  optim::SGD opt(
      std::vector<optim::ParamGroup<optim::SGDOptions>>{{ps, {.lr = 0.1}}, {{q}, {.lr = 0.02}}});
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, 20);
  optim::LinearWarmup s(opt, 5, 0.1, cosine);
  const double base[] = {0.1, 0.02};
  check_schedule(s, opt, 30, [&](int e, size_t g) {
    if (e < 5) return base[g] * (0.1 + 0.9 * e / 5.0);
    return base[g] * (1 + std::cos(std::numbers::pi * (e - 5) / 20.0)) / 2;
  });
  // Without a scheduler to defer to, the lr stays at its base value after the warmup.
  optim::SGD opt2(ps, {.lr = 0.4});
  optim::LinearWarmup w(opt2, 4);
  check_schedule(w, opt2, 8,
                 [](int e, size_t) { return e < 4 ? 0.4 * (0.01 + 0.99 * e / 4.0) : 0.4; });
  EXPECT_DOUBLE_EQ(optim::scale_lr_for_batch(0.1, 1024), 0.4);
}

TEST(Schedulers, StateDictResumes) {
  auto ps = one_param();
  optim::SGD opt(ps, {.lr = 0.1});
  optim::CosineAnnealingLR s(opt, 10);
  for (int i = 0; i < 7; ++i) s.step();
  const auto state = s.state_dict();
  EXPECT_EQ(state.at("last_epoch"), 7);
  EXPECT_EQ(state.at("base_lr.0"), 0.1);

  optim::SGD opt2(ps, {.lr = 0.1});
  optim::CosineAnnealingLR s2(opt2, 10);
  s2.load_state_dict(state);
  EXPECT_EQ(s2.last_epoch(), 7);
  EXPECT_DOUBLE_EQ(opt2.lr(), opt.lr());
  for (int i = 0; i < 5; ++i) {
    s.step();
    s2.step();
    EXPECT_DOUBLE_EQ(opt2.lr(), opt.lr());
  }
  EXPECT_THROW(s2.load_state_dict({{"base_lr.0", 0.1}}), ValueError);
}

}  // namespace
}  // namespace gradus
