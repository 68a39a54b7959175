// docs/guide.md, "Custom autograd functions": an op with a hand-written backward.
//
//   build/examples/example_guide_custom_function
//
// Defines a clipped-gradient identity (forward: x; backward: the gradient clipped to
// [-bound, bound]) and a numerically stable softplus with its own backward, and checks the latter's
// gradient against finite differences in float64.
#include <gradus/gradus.h>

#include <cmath>
#include <cstdio>

using namespace gradus;

// [guide:function]
// softplus(x) = log(1 + exp(x)), computed as max(x, 0) + log1p(exp(-|x|)) so that large |x|
// neither overflows nor loses precision; d/dx = sigmoid(x).
struct StableSoftplus : autograd::Function {
  std::string name() const override { return "StableSoftplus"; }  // used in error messages

  autograd::TensorList forward(autograd::FunctionContext& ctx,
                               const autograd::TensorList& in) override {
    const Tensor& x = in[0];
    ctx.save_for_backward({x});  // version-checked: modifying x in place before backward throws
    return {add(relu(x), log1p(exp(neg(abs(x)))))};
  }

  autograd::TensorList backward(autograd::FunctionContext& ctx,
                                const autograd::TensorList& grad) override {
    const Tensor x = ctx.saved_tensors()[0];
    return {mul(grad[0], sigmoid(x))};  // one gradient per input (undefined: none)
  }
};

Tensor stable_softplus(const Tensor& x) {
  return autograd::apply(std::make_shared<StableSoftplus>(), {x})[0];
}
// [guide:end]

// [guide:function_state]
// Non-tensor state lives in the Function object (one per call): here the clipping bound.
struct ClipGrad : autograd::Function {
  explicit ClipGrad(double bound) : bound(bound) {}
  double bound;
  std::string name() const override { return "ClipGrad"; }
  autograd::TensorList forward(autograd::FunctionContext&,
                               const autograd::TensorList& in) override {
    return {in[0]};  // apply() hands out a fresh handle: the input keeps its own history
  }
  autograd::TensorList backward(autograd::FunctionContext&,
                                const autograd::TensorList& grad) override {
    return {clamp(grad[0], -bound, bound)};
  }
};
// [guide:end]

int main() try {
  manual_seed(0);
  Tensor x = mul(randn({6}, {.dtype = DType::f64}), 30.0).set_requires_grad();
  Tensor y = stable_softplus(x);
  sum(y).backward();
  // Finite differences of the forward in float64.
  const std::vector<double> xs = x.detach().to_vector<double>(), g = x.grad().to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double h = 1e-6;
    const auto f = [](double v) { return std::max(v, 0.0) + std::log1p(std::exp(-std::abs(v))); };
    const double numeric = (f(xs[i] + h) - f(xs[i] - h)) / (2 * h);
    worst = std::max(worst, std::abs(numeric - g[i]));
  }
  std::printf("softplus gradient vs finite differences: max error %.2e\n", worst);

  Tensor w = ones({3}).set_requires_grad();
  // [guide:function_state_use]
  Tensor z = autograd::apply(std::make_shared<ClipGrad>(0.5), {w})[0];
  // [guide:end]
  sum(mul(z, 10.0)).backward();
  const double clipped = w.grad().to_vector<float>()[0];
  std::printf("gradient 10 clipped to %.2f\n", clipped);
  return worst < 1e-6 && clipped == 0.5 ? 0 : 1;
} catch (const gradus::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
