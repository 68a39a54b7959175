// The autograd engine: gradients of composed graphs, accumulation, retain_graph, no_grad, hooks,
// grad(), detach, and the in-place-modification check.
#include <gtest/gtest.h>

#include "support/test_util.h"

namespace gradus {
namespace {

using testing::all_close;
using testing::fresh_seed;
using testing::random_tensor;

TEST(Autograd, ChainRuleThroughSharedSubexpression) {
  // y = sum((a * b + a) * a) => dy/da = 2ab + 2a... computed by hand per element:
  // f = a^2 b + a^2, df/da = 2ab + 2a, df/db = a^2.
  Tensor a = random_tensor({3, 4}, fresh_seed()).set_requires_grad();
  Tensor b = random_tensor({3, 4}, fresh_seed()).set_requires_grad();
  Tensor y = sum(mul(add(mul(a, b), a), a));
  y.backward();
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  const auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  for (size_t i = 0; i < av.size(); ++i) {
    EXPECT_NEAR(ga[i], 2 * av[i] * bv[i] + 2 * av[i], 1e-12);
    EXPECT_NEAR(gb[i], av[i] * av[i], 1e-12);
  }
}

TEST(Autograd, BroadcastGradientsAreReduced) {
  Tensor a = random_tensor({3, 1}, fresh_seed()).set_requires_grad();
  Tensor b = random_tensor({4}, fresh_seed()).set_requires_grad();
  sum(mul(a, b)).backward();
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  double sb = 0, sa = 0;
  for (double v : bv) sb += v;
  for (double v : av) sa += v;
  for (double g : a.grad().to_vector<double>()) EXPECT_NEAR(g, sb, 1e-12);
  for (double g : b.grad().to_vector<double>()) EXPECT_NEAR(g, sa, 1e-12);
  EXPECT_EQ(a.grad().sizes(), (Shape{3, 1}));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = random_tensor({5}, fresh_seed()).set_requires_grad();
  sum(mul(x, 3.0)).backward();
  sum(mul(x, 3.0)).backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_DOUBLE_EQ(g, 6.0);
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor x = random_tensor({5}, fresh_seed()).set_requires_grad();
  Tensor y = sum(mul(x, x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // allowed: the graph was retained
  const auto xv = x.to_vector<double>();
  const auto g = x.grad().to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(g[i], 4 * xv[i], 1e-12);
  EXPECT_THROW(y.backward(), AutogradError);
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = random_tensor({5}, fresh_seed()).set_requires_grad();
  {
    NoGradGuard guard;
    Tensor y = mul(x, 2.0);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_THROW(sum(y).backward(), AutogradError);
  }
  EXPECT_TRUE(mul(x, 2.0).requires_grad());
}

TEST(Autograd, InPlaceModificationOfSavedTensorIsDetected) {
  Tensor x = random_tensor({4}, fresh_seed()).set_requires_grad();
  Tensor w = random_tensor({4}, fresh_seed());
  Tensor y = sum(mul(x, w));  // saves w
  w.fill_(1.0);               // w does not require grad, so this in-place write is allowed...
  try {
    y.backward();  // ...but backward notices that mul's saved w changed
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an in-place operation"), std::string::npos);
  }
  EXPECT_THROW(x.fill_(0.0), AutogradError);  // leaf requiring grad, grad mode on
}

// add_/mul_ on a non-leaf: history is rebased onto the update, gradients match the out-of-place
// computation (float64 reference), and a node that saved the old value fails at backward.
TEST(Autograd, InPlaceAddAndMulOnNonLeafAreDifferentiable) {
  const uint64_t seed = fresh_seed();
  Tensor x = random_tensor({5}, seed).set_requires_grad();
  Tensor z = random_tensor({5}, seed + 1).set_requires_grad();
  Tensor y = mul(x, 3.0);
  y.mul_(2.0);
  y.add_(z, 0.5);
  Tensor w = random_tensor({5}, seed + 2);
  sum(mul(y, w)).backward();  // y = 6x + z/2
  const auto wv = w.to_vector<double>(), xv = x.to_vector<double>(), zv = z.to_vector<double>();
  const auto yv = y.to_vector<double>(), gx = x.grad().to_vector<double>(),
             gz = z.grad().to_vector<double>();
  for (size_t i = 0; i < wv.size(); ++i) {
    EXPECT_NEAR(yv[i], 6 * xv[i] + 0.5 * zv[i], 1e-12);
    EXPECT_NEAR(gx[i], 6 * wv[i], 1e-12);
    EXPECT_NEAR(gz[i], 0.5 * wv[i], 1e-12);
  }
  // exp saves its output; changing it in place must fail at backward, not give wrong gradients.
  Tensor h = exp(x);
  h.mul_(2.0);
  EXPECT_THROW(sum(h).backward(), AutogradError);
  // A leaf that requires grad is still refused in grad mode.
  EXPECT_THROW(x.mul_(2.0), AutogradError);
  EXPECT_THROW(x.add_(z), AutogradError);
}

// mul_ by a tensor: broadcasts and casts the operand like add_, scales in place without history
// (the gradient clipping path), rebases history on a non-leaf (y = f(x); y.mul_(s): the
// gradients of x and s match the product rule), and refuses what add_ refuses.
TEST(Autograd, InPlaceMulByATensor) {
  const uint64_t seed = fresh_seed();
  Tensor a = random_tensor({3, 4}, seed, -1, 1, DType::f32);
  const auto av = a.to_vector<double>();
  const Tensor row = random_tensor({4}, seed + 1, -1, 1, DType::f64);  // cast to a's f32
  const auto rv = row.to_vector<double>();
  const uint64_t version = a.version();
  a.mul_(row);
  EXPECT_GT(a.version(), version);
  const auto got = a.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_FLOAT_EQ(static_cast<float>(got[i]),
                    static_cast<float>(static_cast<float>(av[i]) * static_cast<float>(rv[i % 4])));
  }
  EXPECT_THROW(a.mul_(random_tensor({3}, seed + 2)), ShapeError);
  EXPECT_THROW(random_tensor({4}, seed + 3).mul_(random_tensor({3, 4}, seed + 4)), ShapeError);

  Tensor x = random_tensor({5}, seed + 5).set_requires_grad();
  Tensor s = random_tensor({}, seed + 6).set_requires_grad();
  Tensor y = mul(x, 3.0);
  y.mul_(s);
  Tensor w = random_tensor({5}, seed + 7);
  sum(mul(y, w)).backward();  // y = 3 s x
  const auto wv = w.to_vector<double>(), xv = x.to_vector<double>();
  const double sv = s.item();
  double ds = 0;
  for (size_t i = 0; i < wv.size(); ++i) {
    EXPECT_NEAR(x.grad().to_vector<double>()[i], 3 * sv * wv[i], 1e-5);
    ds += 3 * xv[i] * wv[i];
  }
  EXPECT_NEAR(s.grad().item(), ds, 1e-4);
  EXPECT_THROW(x.mul_(s), AutogradError);  // a leaf that requires grad, grad mode on

  // A tensor without history scaled by one that requires grad gets history (as with add_).
  Tensor c = random_tensor({5}, seed + 8);
  const auto cv = c.to_vector<double>();
  Tensor t = random_tensor({5}, seed + 9).set_requires_grad();
  c.mul_(t);
  EXPECT_TRUE(c.requires_grad());
  sum(c).backward();
  const auto gt = t.grad().to_vector<double>();
  for (size_t i = 0; i < cv.size(); ++i) EXPECT_NEAR(gt[i], cv[i], 1e-12);
}

// d/dx x^0 = 0 everywhere, also at 0 (the formula would be 0 * inf); likewise d/da a^b at b = 0.
TEST(Autograd, PowGradientAtZeroExponentIsZero) {
  Tensor x = from_vector(std::vector<double>{0.0, -1.5, 2.0}, {3}).set_requires_grad();
  sum(pow(x, 0.0)).backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_EQ(g, 0.0);
  Tensor a = from_vector(std::vector<double>{0.0, 0.0, 2.0}, {3}).set_requires_grad();
  Tensor b = from_vector(std::vector<double>{0.0, 1.0, 0.0}, {3}).set_requires_grad();
  sum(pow(a, b)).backward();
  const auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  EXPECT_EQ(ga[0], 0.0);  // 0^0: PyTorch gives 0
  EXPECT_EQ(ga[1], 1.0);  // d/da a^1 = 1
  EXPECT_EQ(ga[2], 0.0);
  for (double g : gb) EXPECT_TRUE(std::isfinite(g));
  EXPECT_EQ(gb[0], 0.0);  // a^b log a at a == 0: 0 by convention
}

TEST(Autograd, GradReturnsWithoutAccumulating) {
  Tensor x = random_tensor({3}, fresh_seed()).set_requires_grad();
  Tensor z = random_tensor({3}, fresh_seed()).set_requires_grad();
  Tensor h = exp(x);
  Tensor y = sum(mul(h, h));
  auto grads = grad({y}, {x, h}, {}, /*retain_graph=*/true);
  const auto xv = x.to_vector<double>();
  const auto gx = grads[0].to_vector<double>(), gh = grads[1].to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(gx[i], 2 * std::exp(2 * xv[i]), 1e-9);
    EXPECT_NEAR(gh[i], 2 * std::exp(xv[i]), 1e-9);
  }
  EXPECT_FALSE(x.grad().defined());
  EXPECT_THROW(grad({y}, {z}, {}, true), AutogradError);
  auto unused = grad({y}, {z}, {}, true, /*allow_unused=*/true);
  EXPECT_FALSE(unused[0].defined());
}

TEST(Autograd, HooksSeeAndReplaceGradients) {
  Tensor x = random_tensor({4}, fresh_seed()).set_requires_grad();
  int calls = 0;
  x.register_hook([&](const Tensor& g) {
    ++calls;
    return mul(g, 10.0);
  });
  int post_calls = 0;
  x.register_post_accumulate_grad_hook([&](Tensor& p) {
    ++post_calls;
    EXPECT_TRUE(p.grad().defined());
  });
  Tensor mid = mul(x, 2.0);
  mid.retain_grad();
  sum(mid).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(post_calls, 1);
  for (double g : x.grad().to_vector<double>()) EXPECT_DOUBLE_EQ(g, 20.0);
  for (double g : mid.grad().to_vector<double>()) EXPECT_DOUBLE_EQ(g, 1.0);
}

TEST(Autograd, DetachCutsHistoryButSharesStorage) {
  Tensor x = random_tensor({4}, fresh_seed()).set_requires_grad();
  Tensor y = mul(x, 2.0);
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.impl()->storage(), y.impl()->storage());
  EXPECT_THROW(Tensor(y).set_requires_grad(false), AutogradError);
}

TEST(Autograd, ViewsAndCatBackward) {
  Tensor x = random_tensor({4, 6}, fresh_seed()).set_requires_grad();
  Tensor s = x.slice(1, 1, 5, 2);    // [4, 2]
  Tensor t = x.t().reshape({6, 4});  // copy path
  Tensor c = cat({s.reshape({8}), t.flatten()}, 0);
  Tensor w = random_tensor({32}, fresh_seed());
  sum(mul(c, w)).backward();
  const auto wv = w.to_vector<double>();
  std::vector<double> expected(24, 0.0);
  for (int i = 0; i < 4; ++i) {
    expected[i * 6 + 1] += wv[i * 2];
    expected[i * 6 + 3] += wv[i * 2 + 1];
  }
  for (int r = 0; r < 6; ++r) {
    for (int col = 0; col < 4; ++col) expected[col * 6 + r] += wv[8 + r * 4 + col];
  }
  const auto g = x.grad().to_vector<double>();
  for (size_t i = 0; i < 24; ++i) EXPECT_NEAR(g[i], expected[i], 1e-12) << i;
}

TEST(Autograd, GradientFlowsThroughDTypeAndBackToLeafDType) {
  Tensor x = random_tensor({3}, fresh_seed(), -1, 1, DType::f32).set_requires_grad();
  Tensor y = sum(mul(x.to(DType::f64), 3.0));
  y.backward();
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  for (double g : x.grad().to_vector<double>()) EXPECT_DOUBLE_EQ(g, 3.0);
}

}  // namespace
}  // namespace gradus

// Not static and not inlined, so its name appears in the captured call stack.
[[gnu::noinline]] gradus::Tensor make_nan_in_forward(const gradus::Tensor& x) {
  return gradus::log(gradus::sub(x, 10.0));  // log of negative values
}

namespace gradus {
namespace {

TEST(Anomaly, ForwardNaNNamesTheOpAndWhereItWasCreated) {
  DetectAnomalyGuard guard;
  Tensor x = testing::random_tensor({4}, testing::fresh_seed(), 0, 1).set_requires_grad();
  try {
    make_nan_in_forward(x);
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("forward of 'log'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("NaN"), std::string::npos) << msg;
    EXPECT_NE(msg.find("make_nan_in_forward"), std::string::npos) << msg;
  }
}

TEST(Anomaly, BackwardInfNamesTheNode) {
  Tensor x = testing::random_tensor({3}, testing::fresh_seed(), 1, 2).set_requires_grad();
  Tensor y;
  {
    DetectAnomalyGuard guard;
    // sqrt(x - x) is finite (0) forward, but its gradient 1 / (2 sqrt(0)) is Inf.
    y = sum(sqrt(sub(x, x)));
    EXPECT_THROW(
        {
          try {
            y.backward();
          } catch (const AutogradError& e) {
            EXPECT_NE(std::string(e.what()).find("backward of 'sqrt'"), std::string::npos)
                << e.what();
            throw;
          }
        },
        AutogradError);
  }
  // Without anomaly mode the same graph runs and yields non-finite gradients silently.
  Tensor z = sum(sqrt(sub(x, x)));
  z.backward();
  EXPECT_FALSE(std::isfinite(x.grad().to_vector<double>()[0]));
}

}  // namespace
}  // namespace gradus
