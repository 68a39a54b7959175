// Gradient clipping: the total norm against a float64 computation, and the scaling applied.
#include <cmath>
#include <limits>

#include "support/test_util.h"

namespace gradus {
namespace {

using testing::fresh_seed;
using testing::random_tensor;
using testing::values_of;

struct GradSet {
  std::vector<Tensor> params;
  std::vector<std::vector<double>> grads;  // host copies of the original gradients
};

GradSet make(uint64_t seed, DType dtype = DType::f32) {
  GradSet s;
  const std::vector<Shape> shapes = {{7, 5}, {5}, {3, 2, 4}, {4}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = random_tensor(shapes[i], seed + i, -1, 1, dtype);
    p.set_requires_grad(true);
    if (i != 3) {  // the last parameter has no gradient and must be skipped
      p.set_grad(random_tensor(shapes[i], seed + 10 + i, -2, 2, dtype));
      s.grads.push_back(values_of(p.grad()));
    }
    s.params.push_back(p);
  }
  return s;
}

double ref_norm(const std::vector<std::vector<double>>& grads, double p) {
  double acc = 0;
  for (const auto& g : grads)
    for (double v : g) {
      if (std::isinf(p)) {
        acc = std::max(acc, std::abs(v));
      } else {
        acc += std::pow(std::abs(v), p);
      }
    }
  return std::isinf(p) ? acc : std::pow(acc, 1.0 / p);
}

TEST(ClipGradNorm, TotalNormAndScalingForSeveralNormTypes) {
  for (double p : {2.0, 1.0, 3.0, optim::kInfNorm}) {
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " norm " << p);
    GradSet s = make(seed);
    const double total = ref_norm(s.grads, p);
    const double max_norm = total / 3;
    const Tensor got = optim::clip_grad_norm(s.params, max_norm, p);
    EXPECT_EQ(got.numel(), 1);
    EXPECT_NEAR(got.item(), total, 1e-5 * total);
    const double coef = max_norm / (total + 1e-6);
    for (size_t i = 0; i < s.grads.size(); ++i) {
      const auto now = values_of(s.params[i].grad());
      for (size_t j = 0; j < now.size(); ++j) EXPECT_NEAR(now[j], s.grads[i][j] * coef, 1e-5);
    }
    EXPECT_FALSE(s.params[3].grad().defined());
    // After clipping, the norm is max_norm.
    std::vector<std::vector<double>> clipped;
    for (size_t i = 0; i < s.grads.size(); ++i) clipped.push_back(values_of(s.params[i].grad()));
    EXPECT_NEAR(ref_norm(clipped, p), max_norm, 1e-4 * max_norm);
  }
}

TEST(ClipGradNorm, LeavesSmallGradientsUntouched) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  GradSet s = make(seed, DType::f64);
  const double total = ref_norm(s.grads, 2);
  const Tensor got = optim::clip_grad_norm(s.params, 2 * total);
  EXPECT_EQ(got.dtype(), DType::f64);
  EXPECT_NEAR(got.item(), total, 1e-12 * total);
  for (size_t i = 0; i < s.grads.size(); ++i) EXPECT_EQ(values_of(s.params[i].grad()), s.grads[i]);
}

TEST(ClipGradNorm, NonFiniteAndEdgeCases) {
  const uint64_t seed = fresh_seed();
  GradSet s = make(seed);
  {
    NoGradGuard g;
    Tensor grad = s.params[1].grad();
    grad.copy_(full({5}, std::numeric_limits<double>::quiet_NaN()));
  }
  EXPECT_THROW(optim::clip_grad_norm(s.params, 1.0, 2.0, /*error_if_nonfinite=*/true), ValueError);
  EXPECT_TRUE(std::isnan(optim::clip_grad_norm(s.params, 1.0).item()));
  EXPECT_THROW(optim::clip_grad_norm(s.params, 1.0, 0.0), ValueError);

  Tensor lonely = zeros({3});
  lonely.set_requires_grad(true);
  EXPECT_EQ(optim::clip_grad_norm({lonely}, 1.0).item(), 0.0);
}

TEST(ClipGradValue, Clamps) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  GradSet s = make(seed);
  optim::clip_grad_value(s.params, 0.5);
  for (size_t i = 0; i < s.grads.size(); ++i) {
    const auto now = values_of(s.params[i].grad());
    for (size_t j = 0; j < now.size(); ++j)
      EXPECT_FLOAT_EQ(static_cast<float>(now[j]),
                      static_cast<float>(std::clamp(s.grads[i][j], -0.5, 0.5)));
  }
  EXPECT_THROW(optim::clip_grad_value(s.params, -1), ValueError);
}

}  // namespace
}  // namespace gradus
