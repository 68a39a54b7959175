// Activation functions: one fused forward kernel each, backward through a fused helper where the
// derivative needs the input (relu, gelu, silu, leaky_relu) or from the output (tanh, sigmoid);
// swiglu, the SwiGLU MLP's silu(gate) * up.
#include "ops/autocast.h"
#include "ops/common.h"

namespace gradus {

using namespace ops;
using backend::BinaryOp;
using backend::UnaryOp;

namespace {

Tensor activation_forward(UnaryOp op, const char* name, const Tensor& x, double a = 0,
                          double b = 0) {
  check_defined(name, {&x});
  check_floating(name, x);
  Tensor out = new_empty(x.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) backend_of(x).unary(op, x, out, a, b);
  return out;
}

// grad_x = helper(grad, saved) for the binary backward helpers of backend.h.
Tensor binary_backward(BinaryOp op, const Tensor& g, const Tensor& saved, double alpha = 0) {
  Tensor gx = new_empty(g.sizes(), g.dtype(), g.device());
  if (gx.numel() > 0) {
    backend_of(g).binary(op, g, broadcast_raw(cast_raw(saved, g.dtype()), g.sizes()), gx, alpha);
  }
  return gx;
}

Tensor unary_backward(UnaryOp op, const Tensor& g, const Tensor& y) {
  Tensor d = new_empty(y.sizes(), g.dtype(), g.device());
  if (d.numel() > 0) backend_of(g).unary(op, cast_raw(y, g.dtype()), d, 0, 0);
  return mul(g, d);
}

}  // namespace

Tensor relu(const Tensor& x) {
  GRADUS_PROFILE_OP("relu");
  Tensor out = activation_forward(UnaryOp::relu, "relu", x);
  // The output's sign pattern equals the input's, so saving the output is enough.
  return record("relu", out, {x}, [so = SavedTensor(out)](const TensorList& g, const NeedsGrad&) {
    return TensorList{binary_backward(BinaryOp::relu_backward, g[0], so.get())};
  });
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  GRADUS_PROFILE_OP("leaky_relu");
  Tensor out = activation_forward(UnaryOp::leaky_relu, "leaky_relu", x, negative_slope);
  return record("leaky_relu", out, {x},
                [sx = SavedTensor(x), negative_slope](const TensorList& g, const NeedsGrad&) {
                  return TensorList{binary_backward(BinaryOp::leaky_relu_backward, g[0], sx.get(),
                                                    negative_slope)};
                });
}

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  GRADUS_PROFILE_OP("gelu");
  const bool tanh_form = approximate == GeluApproximation::tanh;
  Tensor out = activation_forward(tanh_form ? UnaryOp::gelu_tanh : UnaryOp::gelu, "gelu", x);
  return record(
      "gelu", out, {x}, [sx = SavedTensor(x), tanh_form](const TensorList& g, const NeedsGrad&) {
        return TensorList{binary_backward(
            tanh_form ? BinaryOp::gelu_tanh_backward : BinaryOp::gelu_backward, g[0], sx.get())};
      });
}

Tensor silu(const Tensor& x) {
  GRADUS_PROFILE_OP("silu");
  Tensor out = activation_forward(UnaryOp::silu, "silu", x);
  return record("silu", out, {x}, [sx = SavedTensor(x)](const TensorList& g, const NeedsGrad&) {
    return TensorList{binary_backward(BinaryOp::silu_backward, g[0], sx.get())};
  });
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  GRADUS_PROFILE_OP("swiglu");
  const char* op = "swiglu";
  check_defined(op, {&gate, &up});
  check_same_device(op, {&gate, &up});
  check_floating(op, gate);
  GRADUS_CHECK(gate.sizes() == up.sizes() && gate.dtype() == up.dtype(), ShapeError,
               "swiglu: gate and up must have one shape and dtype, got ", shape_str(gate.sizes()),
               " ", dtype_name(gate.dtype()), " and ", shape_str(up.sizes()), " ",
               dtype_name(up.dtype()));
  Tensor out = new_empty(gate.sizes(), gate.dtype(), gate.device());
  if (out.numel() > 0) backend_of(gate).binary(BinaryOp::swiglu, gate, up, out, 0);
  return record(
      op, out, {gate, up},
      [sg = SavedTensor(gate), su = SavedTensor(up)](const TensorList& g, const NeedsGrad&) {
        // Both gradients in one pass (one sigmoid per element), contiguous.
        const Tensor dy = contiguous_raw(g[0]);
        const Tensor gate = contiguous_raw(cast_raw(sg.get(), dy.dtype())),
                     up = contiguous_raw(cast_raw(su.get(), dy.dtype()));
        Tensor dgate = new_empty(dy.sizes(), dy.dtype(), dy.device());
        Tensor dup = new_empty(dy.sizes(), dy.dtype(), dy.device());
        backend_of(dy).swiglu_backward(dy, gate, up, dgate, dup);
        return TensorList{dgate, dup};
      });
}

Tensor sigmoid(const Tensor& x) {
  GRADUS_PROFILE_OP("sigmoid");
  Tensor out = activation_forward(UnaryOp::sigmoid, "sigmoid", x);
  return record(
      "sigmoid", out, {x}, [so = SavedTensor(out)](const TensorList& g, const NeedsGrad&) {
        return TensorList{unary_backward(UnaryOp::sigmoid_grad_from_output, g[0], so.get())};
      });
}

Tensor tanh(const Tensor& x) {
  GRADUS_PROFILE_OP("tanh");
  Tensor out = activation_forward(UnaryOp::tanh, "tanh", x);
  return record("tanh", out, {x}, [so = SavedTensor(out)](const TensorList& g, const NeedsGrad&) {
    return TensorList{unary_backward(UnaryOp::tanh_grad_from_output, g[0], so.get())};
  });
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  GRADUS_PROFILE_OP("softplus");
  if (AutocastInputs cast{"softplus", {&x}}) return softplus(cast[0], beta, threshold);
  GRADUS_CHECK(beta != 0, ValueError, "softplus: beta must be non-zero");
  Tensor out = activation_forward(UnaryOp::softplus, "softplus", x, beta, threshold);
  return record("softplus", out, {x},
                [sx = SavedTensor(x), beta, threshold](const TensorList& g, const NeedsGrad&) {
                  // d/dx = sigmoid(beta x), or 1 in the linear region beta x > threshold.
                  Tensor bx = mul(sx.get(), beta);
                  Tensor d = where(gt(bx, threshold), ones_like(bx), sigmoid(bx));
                  return TensorList{mul(g[0], d)};
                });
}

}  // namespace gradus
