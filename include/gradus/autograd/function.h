// Ops with a custom backward, written outside gradus (the same mechanism gradus's own ops use).
//
//   struct ScaledTanh : autograd::Function {
//     double scale;
//     explicit ScaledTanh(double s) : scale(s) {}
//     std::string name() const override { return "ScaledTanh"; }
//     TensorList forward(autograd::FunctionContext& ctx, const TensorList& in) override {
//       Tensor y = mul(tanh(in[0]), scale);
//       ctx.save_for_backward({y});
//       return {y};
//     }
//     TensorList backward(autograd::FunctionContext& ctx, const TensorList& grad) override {
//       const Tensor y = ctx.saved_tensors()[0];   // d/dx s*tanh(x) = s - y^2/s
//       return {mul(grad[0], sub(scale, div(mul(y, y), scale)))};
//     }
//   };
//   Tensor y = autograd::apply(std::make_shared<ScaledTanh>(2.0), {x})[0];
//
// forward runs with grad mode off (nothing inside it is recorded); its outputs get one node
// whose backward calls backward(). backward also runs with grad mode off, once per backward pass
// (retain_graph keeps the context for another). It returns one gradient per input: undefined for
// an input that needs none (ctx.needs_input_grad(i) says which do). A gradient whose shape or
// device differs from its input's is an error naming the function; a different floating dtype is
// cast to the input's. Non-tensor state lives in the Function object (one per apply call).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::autograd {

using TensorList = std::vector<Tensor>;
class Function;
TensorList apply(const std::shared_ptr<Function>& fn, const TensorList& inputs);

class FunctionContext {
 public:
  // Tensors backward will need (inputs or outputs). Reading one after it was modified in place
  // throws AutogradError.
  void save_for_backward(const TensorList& tensors);
  TensorList saved_tensors() const;
  // Whether input i requires a gradient in this call.
  bool needs_input_grad(size_t i) const;
  size_t num_inputs() const { return needs_.size(); }

 private:
  friend TensorList apply(const std::shared_ptr<Function>& fn, const TensorList& inputs);
  struct Saved;
  std::shared_ptr<Saved> saved_;
  std::vector<bool> needs_;
};

class Function {
 public:
  virtual ~Function() = default;
  // The name errors, anomaly reports and (later) profiles use.
  virtual std::string name() const = 0;
  virtual TensorList forward(FunctionContext& ctx, const TensorList& inputs) = 0;
  virtual TensorList backward(FunctionContext& ctx, const TensorList& grad_outputs) = 0;
};

// Runs fn->forward on `inputs` and records fn->backward as the outputs' gradient rule (when grad
// mode is on and some input requires grad). Inputs may be undefined (optional arguments).
TensorList apply(const std::shared_ptr<Function>& fn, const TensorList& inputs);

}  // namespace gradus::autograd
