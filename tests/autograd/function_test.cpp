// autograd::Function: user ops with a custom backward. Gradients against finite differences and
// against the same computation built from gradus ops; several inputs and outputs; inputs that
// need no gradient; saved tensors modified in place; malformed backward results.
#include <gtest/gtest.h>

#include "gradus/autograd/function.h"
#include "gradus/gradus.h"
#include "support/test_util.h"

namespace gradus {
namespace {

using autograd::FunctionContext;
using autograd::TensorList;
using testing::all_close;
using testing::fresh_seed;
using testing::random_tensor;

struct ScaledTanh : autograd::Function {
  double scale;
  int* backward_calls;
  ScaledTanh(double s, int* calls) : scale(s), backward_calls(calls) {}
  std::string name() const override { return "ScaledTanh"; }
  TensorList forward(FunctionContext& ctx, const TensorList& in) override {
    EXPECT_FALSE(is_grad_enabled());  // nothing inside forward is recorded
    Tensor y = mul(tanh(in[0]), scale);
    ctx.save_for_backward({y});
    return {y};
  }
  TensorList backward(FunctionContext& ctx, const TensorList& grad) override {
    ++*backward_calls;
    const Tensor y = ctx.saved_tensors()[0];  // d/dx s tanh(x) = s - y^2 / s
    return {mul(grad[0], sub(full_like(y, scale), div(mul(y, y), scale)))};
  }
};

// (a, b) -> (a * b, a + 2b), with backward asserting which inputs need gradients.
struct MulAdd : autograd::Function {
  std::vector<bool> seen_needs;
  std::string name() const override { return "MulAdd"; }
  TensorList forward(FunctionContext& ctx, const TensorList& in) override {
    ctx.save_for_backward({in[0], in[1]});
    return {mul(in[0], in[1]), add(in[0], mul(in[1], 2.0))};
  }
  TensorList backward(FunctionContext& ctx, const TensorList& g) override {
    seen_needs = {ctx.needs_input_grad(0), ctx.needs_input_grad(1)};
    const TensorList s = ctx.saved_tensors();
    return {add(mul(g[0], s[1]), g[1]), add(mul(g[0], s[0]), mul(g[1], 2.0))};
  }
};

TEST(Function, GradientMatchesFiniteDifferencesAndTheBuiltInComposite) {
  int calls = 0;
  const Tensor x0 = random_tensor({3, 4}, fresh_seed(), -2, 2);  // float64
  Tensor x = x0.clone().set_requires_grad();
  const Tensor w = random_tensor({3, 4}, fresh_seed());
  Tensor y = autograd::apply(std::make_shared<ScaledTanh>(1.5, &calls), {x})[0];
  EXPECT_TRUE(y.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  sum(mul(y, w)).backward();
  EXPECT_EQ(calls, 1);
  // The same function from built-in ops.
  Tensor xr = x0.clone().set_requires_grad();
  sum(mul(mul(tanh(xr), 1.5), w)).backward();
  EXPECT_TRUE(all_close(x.grad(), xr.grad(), 1e-12, 1e-12));
  // Central differences, element by element.
  const std::vector<double> base = x0.to_vector<double>();
  const std::vector<double> analytic = x.grad().to_vector<double>();
  const double h = 1e-6;
  for (size_t i = 0; i < base.size(); ++i) {
    auto f = [&](double delta) {
      std::vector<double> v = base;
      v[i] += delta;
      const Tensor xi = tensor(v, {3, 4}, {.dtype = DType::f64});
      return sum(mul(mul(tanh(xi), 1.5), w)).item();
    };
    EXPECT_NEAR(analytic[i], (f(h) - f(-h)) / (2 * h), 1e-7) << i;
  }
}

TEST(Function, SeveralInputsAndOutputsAndInputsWithoutGrad) {
  const Tensor a0 = random_tensor({5}, fresh_seed()), b0 = random_tensor({5}, fresh_seed());
  Tensor a = a0.clone().set_requires_grad();
  const Tensor b = b0.clone();  // needs no gradient
  auto fn = std::make_shared<MulAdd>();
  const TensorList out = autograd::apply(fn, {a, b});
  ASSERT_EQ(out.size(), 2u);
  // Only the second output is used: the first's gradient arrives as zeros.
  sum(mul(out[1], out[1])).backward();
  EXPECT_EQ(fn->seen_needs, (std::vector<bool>{true, false}));
  // d/da sum((a + 2b)^2) = 2 (a + 2b)
  EXPECT_TRUE(all_close(a.grad(), mul(add(a0, mul(b0, 2.0)), 2.0), 1e-12, 1e-12));
  EXPECT_FALSE(b.grad().defined());
}

TEST(Function, NoRecordingWithoutGradOrUnderNoGrad) {
  int calls = 0;
  const Tensor x = random_tensor({4}, fresh_seed());
  EXPECT_FALSE(autograd::apply(std::make_shared<ScaledTanh>(1.0, &calls), {x})[0].requires_grad());
  Tensor xg = x.clone().set_requires_grad();
  NoGradGuard no_grad;
  EXPECT_FALSE(autograd::apply(std::make_shared<ScaledTanh>(1.0, &calls), {xg})[0].requires_grad());
}

struct Identity : autograd::Function {
  std::string name() const override { return "Identity"; }
  TensorList forward(FunctionContext&, const TensorList& in) override { return {in[0]}; }
  TensorList backward(FunctionContext&, const TensorList& g) override { return {g[0]}; }
};

TEST(Function, ReturningAnInputDoesNotTakeOverItsHistory) {
  Tensor x = random_tensor({3}, fresh_seed()).set_requires_grad();
  Tensor y = autograd::apply(std::make_shared<Identity>(), {x})[0];
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  sum(mul(y, 3.0)).backward();
  EXPECT_TRUE(all_close(x.grad(), full_like(x, 3.0), 0, 0));
}

TEST(Function, SecondBackwardNeedsRetainGraph) {
  int calls = 0;
  Tensor x = random_tensor({3}, fresh_seed()).set_requires_grad();
  Tensor y = sum(autograd::apply(std::make_shared<ScaledTanh>(2.0, &calls), {x})[0]);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(calls, 2);
  EXPECT_THROW(y.backward(), AutogradError);
  EXPECT_EQ(calls, 2);
}

TEST(Function, SavedTensorModifiedInPlaceIsAnError) {
  struct SavesInput : autograd::Function {
    std::string name() const override { return "SavesInput"; }
    TensorList forward(FunctionContext& ctx, const TensorList& in) override {
      ctx.save_for_backward({in[1]});
      return {mul(in[0], in[1])};
    }
    TensorList backward(FunctionContext& ctx, const TensorList& g) override {
      return {mul(g[0], ctx.saved_tensors()[0]), Tensor()};
    }
  };
  Tensor x = random_tensor({3}, fresh_seed()).set_requires_grad();
  Tensor s = random_tensor({3}, fresh_seed());
  Tensor y = autograd::apply(std::make_shared<SavesInput>(), {x, s})[0];
  s.add_(ones_like(s));
  EXPECT_THROW(sum(y).backward(), AutogradError);
}

struct BadBackward : autograd::Function {
  int mode;
  explicit BadBackward(int m) : mode(m) {}
  std::string name() const override { return "BadBackward"; }
  TensorList forward(FunctionContext&, const TensorList& in) override { return {mul(in[0], 2.0)}; }
  TensorList backward(FunctionContext&, const TensorList& g) override {
    if (mode == 0) return {};                    // wrong count
    if (mode == 1) return {g[0].reshape({-1})};  // wrong shape
    return {g[0].to(DType::f32)};                // other dtype: cast back
  }
};

TEST(Function, MalformedBackwardResultsNameTheFunction) {
  auto run = [](int mode) {
    Tensor x = random_tensor({2, 3}, fresh_seed()).set_requires_grad();
    sum(autograd::apply(std::make_shared<BadBackward>(mode), {x})[0]).backward();
    return x;
  };
  try {
    run(0);
    ADD_FAILURE() << "no error for a missing gradient";
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("BadBackward: backward returned 0 gradient(s) for 1"),
              std::string::npos)
        << e.what();
  }
  try {
    run(1);
    ADD_FAILURE() << "no error for a wrong shape";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("gradient of shape [6] for input 0 of shape [2, 3]"),
              std::string::npos)
        << e.what();
  }
  const Tensor x = run(2);
  EXPECT_EQ(x.grad().dtype(), DType::f64);
  EXPECT_TRUE(all_close(x.grad(), ones_like(x), 0, 0));
}

}  // namespace
}  // namespace gradus
