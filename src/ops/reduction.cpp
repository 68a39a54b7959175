// Reductions: sum, mean, prod, var/std, max/min (+ indices), amax/amin, argmax/argmin,
// logsumexp, norm, any/all, and the Tensor::sum/mean/argmax methods.
//
// Forward runs the backend's reduce kernel, which always keeps the reduced axes as size 1; the
// keepdim=false result is a free view of that fresh contiguous tensor. Backward rules bring the
// gradient back to the input's shape with reshape(keep_shape).expand(input_shape).
//
// Conventions (PyTorch's): an empty `dims` list means every axis; a 0-d input is reduced as a
// one-element tensor; sums of integer/bool tensors are int64; mean/var/std/logsumexp/norm of
// integer tensors are computed in float32 (PyTorch refuses these; we promote like `div`).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/autocast.h"
#include "ops/common.h"

namespace gradus {
namespace ops {
namespace {

using backend::BinaryOp;
using backend::ReduceOp;
using backend::UnaryOp;

// One reduction's geometry, captured by value in backward lambdas.
struct ReducePlan {
  std::vector<int64_t> dims;  // sorted reduced axes (empty only for a 0-d input)
  Shape in_shape;             // the input's shape
  Shape keep_shape;           // in_shape with reduced axes set to 1
  Shape out_shape;            // keep_shape, or with the reduced axes removed (keepdim=false)
  int64_t count = 1;          // elements per reduced slice
};

ReducePlan plan_reduce(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                       const char* op) {
  ReducePlan p;
  p.in_shape = x.sizes();
  p.dims = normalize_dims(dims, x.dim(), op);
  p.keep_shape = p.in_shape;
  if (x.dim() == 0) {  // dims was {}, {0} or {-1}: the scalar itself
    p.dims.clear();
    return p;
  }
  for (int64_t d : p.dims) {
    p.count *= p.in_shape[d];
    p.keep_shape[d] = 1;
  }
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (keepdim || !std::binary_search(p.dims.begin(), p.dims.end(), i)) {
      p.out_shape.push_back(p.keep_shape[i]);
    }
  }
  return p;
}

// A 0-d tensor is reduced as a [1] tensor over axis 0.
Tensor lift_scalar(const Tensor& x) {
  return x.dim() == 0 ? x.as_strided_raw({1}, {1}, x.offset()) : x;
}

// Runs `op` over p.dims of x (already in the kernel's input dtype) into a fresh contiguous
// tensor of out_dtype shaped p.keep_shape. `identity` fills outputs of empty reductions.
Tensor reduce_keep(ReduceOp op, const Tensor& x, const ReducePlan& p, DType out_dtype,
                   double identity) {
  Tensor out = new_empty(p.keep_shape, out_dtype, x.device());
  if (out.numel() == 0) return out;
  if (x.numel() == 0) {
    backend_of(x).fill(out, identity);
    return out;
  }
  Tensor xl = lift_scalar(x);
  const Tensor ol = lift_scalar(out);
  backend_of(x).reduce(op, xl, ol, x.dim() == 0 ? std::vector<int64_t>{0} : p.dims);
  return out;
}

// The keepdim=false (or keepdim=true) view of a keep-shaped contiguous result.
Tensor to_out(const Tensor& keep, const ReducePlan& p) {
  if (keep.sizes() == p.out_shape) return keep;
  return keep.as_strided_raw(p.out_shape, contiguous_strides(p.out_shape), keep.offset());
}

// The incoming gradient (out_shape) broadcast back over the input's shape.
Tensor expand_grad(const Tensor& g, const ReducePlan& p) {
  return g.reshape(p.keep_shape).expand(p.in_shape);
}

DType float_dtype(DType t) {
  return is_floating(t) ? t : DType::f32;
}

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Throws ValueError for max/min-like reductions over zero elements (they have no identity).
void check_nonempty_slices(const ReducePlan& p, const Tensor& x, const char* op) {
  GRADUS_CHECK(p.count > 0, ValueError, op, ": cannot reduce over zero elements (input shape ",
               shape_str(x.sizes()), "): the operation has no identity");
}

// Gradient of amax/amin/max/min (all): split evenly between the elements equal to the result.
Tensor extremum_backward(const Tensor& g, const Tensor& x, const Tensor& out_keep,
                         const ReducePlan& p) {
  Tensor mask = eq(x, out_keep);
  Tensor count = sum(mask, p.dims, /*keepdim=*/true);
  Tensor share = div(g.reshape(p.keep_shape), count);
  return where(mask, share.expand(p.in_shape), 0.0);
}

Tensor amax_amin(bool is_max, const char* name, const Tensor& x, const std::vector<int64_t>& dims,
                 bool keepdim) {
  check_defined(name, {&x});
  const ReducePlan p = plan_reduce(x, dims, keepdim, name);
  check_nonempty_slices(p, x, name);
  Tensor keep = reduce_keep(is_max ? ReduceOp::max : ReduceOp::min, x, p, x.dtype(), 0.0);
  return record(
      name, to_out(keep, p), {x},
      [p, sx = SavedTensor(x), sk = SavedTensor(keep)](const TensorList& g, const NeedsGrad&) {
        return TensorList{extremum_backward(g[0], sx.get(), sk.get(), p)};
      });
}

// max/min along one axis: values plus the (first) index of the extreme value.
ValuesIndices extremum_dim(bool is_max, const char* name, const Tensor& x, int64_t dim,
                           bool keepdim) {
  check_defined(name, {&x});
  const ReducePlan p = plan_reduce(x, {dim}, keepdim, name);
  check_nonempty_slices(p, x, name);
  Tensor idx_keep =
      reduce_keep(is_max ? ReduceOp::argmax : ReduceOp::argmin, x, p, DType::i64, 0.0);
  Tensor val_keep = new_empty(p.keep_shape, x.dtype(), x.device());
  const int64_t axis = x.dim() == 0 ? 0 : p.dims[0];
  if (val_keep.numel() > 0) {
    // Picking the values by index keeps values and indices consistent (also with NaNs).
    backend_of(x).gather(lift_scalar(contiguous_raw(x)), axis, lift_scalar(idx_keep),
                         lift_scalar(val_keep));
  }
  TensorList outs =
      record_multi(name, {to_out(val_keep, p), to_out(idx_keep, p)}, {x},
                   [p, axis, si = SavedTensor(idx_keep)](const TensorList& g, const NeedsGrad&) {
                     if (p.in_shape.empty()) return TensorList{g[0]};
                     // The gradient flows to the selected element of each slice.
                     Tensor gx = zeros(p.in_shape, g[0].options());
                     if (gx.numel() > 0) {
                       backend_of(gx).scatter_add(gx, axis, si.get(),
                                                  contiguous_raw(g[0].reshape(p.keep_shape)));
                     }
                     return TensorList{gx};
                   });
  return {outs[0], outs[1]};
}

Tensor arg_extremum(bool is_max, const char* name, const Tensor& x, int64_t dim, bool keepdim) {
  check_defined(name, {&x});
  const ReducePlan p = plan_reduce(x, {dim}, keepdim, name);
  check_nonempty_slices(p, x, name);
  return to_out(reduce_keep(is_max ? ReduceOp::argmax : ReduceOp::argmin, x, p, DType::i64, 0.0),
                p);
}

// Sample variance pieces, all history-free: the keep-shaped mean and the keep-shaped variance.
struct Moments {
  Tensor mean_keep;
  Tensor var_keep;
  double divisor;  // max(0, N - correction)
};

Moments moments(const Tensor& x, const ReducePlan& p, int64_t correction) {
  Backend& be = backend_of(x);
  Moments m;
  m.mean_keep = reduce_keep(ReduceOp::mean, x, p, x.dtype(), kNaN);
  Tensor diff = new_empty(x.sizes(), x.dtype(), x.device());
  if (diff.numel() > 0) {
    be.binary(BinaryOp::sub, x, broadcast_raw(m.mean_keep, x.sizes()), diff, 1.0);
  }
  Tensor ss = reduce_keep(ReduceOp::sum_squares, diff, p, x.dtype(), 0.0);
  // PyTorch clamps N - correction at 0; dividing by 0 then gives inf (or NaN for 0/0).
  m.divisor = std::max<double>(0.0, static_cast<double>(p.count - correction));
  m.var_keep = new_empty(p.keep_shape, x.dtype(), x.device());
  if (ss.numel() > 0) {
    if (m.divisor > 0) {
      be.unary(UnaryOp::affine, ss, m.var_keep, 1.0 / m.divisor, 0.0);
    } else {
      // affine(x * inf) would turn 0 into NaN but also NaN into NaN: exactly PyTorch's x / 0.
      be.unary(UnaryOp::affine, ss, m.var_keep, kInf, 0.0);
    }
  }
  return m;
}

}  // namespace
}  // namespace ops

using namespace ops;

// ------------------------------------------------------------------------------ sum, mean, prod
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  GRADUS_PROFILE_OP("sum");
  if (AutocastInputs cast{"sum", {&x}}) return sum(cast[0], dims, keepdim);
  check_defined("sum", {&x});
  const ReducePlan p = plan_reduce(x, dims, keepdim, "sum");
  const DType t = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  Tensor out = to_out(reduce_keep(ReduceOp::sum, cast_raw(x, t), p, t, 0.0), p);
  return record("sum", out, {x}, [p](const TensorList& g, const NeedsGrad&) {
    return TensorList{expand_grad(g[0], p)};
  });
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  GRADUS_PROFILE_OP("mean");
  if (AutocastInputs cast{"mean", {&x}}) return mean(cast[0], dims, keepdim);
  check_defined("mean", {&x});
  const ReducePlan p = plan_reduce(x, dims, keepdim, "mean");
  const DType t = float_dtype(x.dtype());
  Tensor out = to_out(reduce_keep(ReduceOp::mean, cast_raw(x, t), p, t, kNaN), p);
  return record("mean", out, {x}, [p](const TensorList& g, const NeedsGrad&) {
    return TensorList{expand_grad(div(g[0], static_cast<double>(p.count)), p)};
  });
}

Tensor prod(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  GRADUS_PROFILE_OP("prod");
  if (AutocastInputs cast{"prod", {&x}}) return prod(cast[0], dims, keepdim);
  check_defined("prod", {&x});
  const ReducePlan p = plan_reduce(x, dims, keepdim, "prod");
  const DType t = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  Tensor keep = reduce_keep(ReduceOp::prod, cast_raw(x, t), p, t, 1.0);
  return record(
      "prod", to_out(keep, p), {x},
      [p, sx = SavedTensor(x), sk = SavedTensor(keep)](const TensorList& g, const NeedsGrad&) {
        // d prod / d x_i = prod_{j != i} x_j. Where x_i != 0 that is out / x_i (0 when another
        // element of the slice is zero). Where x_i == 0 it is the product of the others, non-zero
        // only when x_i is the slice's single zero: computed from the zero-free product.
        Tensor xv = sx.get();
        Tensor gk = g[0].reshape(p.keep_shape);
        Tensor is_zero = eq(xv, 0.0);
        Tensor safe_x = where(is_zero, ones_like(xv), xv);
        Tensor nonzero_grad = div(mul(gk, sk.get()), safe_x);
        Tensor zeros_in_slice = sum(is_zero, p.dims, /*keepdim=*/true);
        Tensor prod_others = prod(safe_x, p.dims, /*keepdim=*/true);
        Tensor zero_grad = where(eq(zeros_in_slice, 1.0), mul(gk, prod_others), 0.0);
        return TensorList{where(is_zero, zero_grad.expand(p.in_shape), nonzero_grad)};
      });
}

// ------------------------------------------------------------------------------ var, std
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  GRADUS_PROFILE_OP("var");
  if (AutocastInputs cast{"var", {&x}}) return var(cast[0], dims, correction, keepdim);
  check_defined("var", {&x});
  const ReducePlan p = plan_reduce(x, dims, keepdim, "var");
  const Tensor xf = cast_raw(x, float_dtype(x.dtype()));
  const Moments m = moments(xf, p, correction);
  return record("var", to_out(m.var_keep, p), {x},
                [p, sx = SavedTensor(xf), sm = SavedTensor(m.mean_keep), d = m.divisor](
                    const TensorList& g, const NeedsGrad&) {
                  // d var / d x_i = 2 (x_i - mean) / (N - correction)
                  Tensor centered = sub(sx.get(), sm.get());
                  return TensorList{mul(mul(centered, expand_grad(g[0], p)), 2.0 / d)};
                });
}

Tensor std(const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim) {
  GRADUS_PROFILE_OP("std");
  if (AutocastInputs cast{"std", {&x}}) return std(cast[0], dims, correction, keepdim);
  check_defined("std", {&x});
  const ReducePlan p = plan_reduce(x, dims, keepdim, "std");
  const Tensor xf = cast_raw(x, float_dtype(x.dtype()));
  const Moments m = moments(xf, p, correction);
  Tensor keep = new_empty(p.keep_shape, xf.dtype(), x.device());
  if (keep.numel() > 0) backend_of(x).unary(UnaryOp::sqrt, m.var_keep, keep, 0, 0);
  return record("std", to_out(keep, p), {x},
                [p, sx = SavedTensor(xf), sm = SavedTensor(m.mean_keep), sk = SavedTensor(keep),
                 d = m.divisor](const TensorList& g, const NeedsGrad&) {
                  // d std / d x_i = (x_i - mean) / ((N - correction) * std)
                  Tensor centered = sub(sx.get(), sm.get());
                  Tensor scale = div(g[0].reshape(p.keep_shape), mul(sk.get(), d));
                  return TensorList{mul(centered, scale)};
                });
}

// ------------------------------------------------------------------------------ max, min
Tensor max(const Tensor& x) {
  GRADUS_PROFILE_OP("max");
  return amax_amin(true, "max", x, {}, false);
}
Tensor min(const Tensor& x) {
  GRADUS_PROFILE_OP("min");
  return amax_amin(false, "min", x, {}, false);
}
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  GRADUS_PROFILE_OP("amax");
  return amax_amin(true, "amax", x, dims, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  GRADUS_PROFILE_OP("amin");
  return amax_amin(false, "amin", x, dims, keepdim);
}
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) {
  GRADUS_PROFILE_OP("max");
  return extremum_dim(true, "max", x, dim, keepdim);
}
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) {
  GRADUS_PROFILE_OP("min");
  return extremum_dim(false, "min", x, dim, keepdim);
}
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  GRADUS_PROFILE_OP("argmax");
  return arg_extremum(true, "argmax", x, dim, keepdim);
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  GRADUS_PROFILE_OP("argmin");
  return arg_extremum(false, "argmin", x, dim, keepdim);
}

// ------------------------------------------------------------------------------ logsumexp, norm
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  GRADUS_PROFILE_OP("logsumexp");
  if (AutocastInputs cast{"logsumexp", {&x}}) return logsumexp(cast[0], dims, keepdim);
  check_defined("logsumexp", {&x});
  const ReducePlan p = plan_reduce(x, dims, keepdim, "logsumexp");
  const Tensor xf = cast_raw(x, float_dtype(x.dtype()));
  Tensor keep = reduce_keep(ReduceOp::logsumexp, xf, p, xf.dtype(), -kInf);
  return record(
      "logsumexp", to_out(keep, p), {x},
      [p, sx = SavedTensor(xf), sk = SavedTensor(keep)](const TensorList& g, const NeedsGrad&) {
        // d lse / d x_i = softmax(x)_i = exp(x_i - lse)
        return TensorList{mul(exp(sub(sx.get(), sk.get())), g[0].reshape(p.keep_shape))};
      });
}

Tensor norm(const Tensor& x) {
  GRADUS_PROFILE_OP("norm");
  if (AutocastInputs cast{"norm", {&x}}) return norm(cast[0]);
  check_defined("norm", {&x});
  const ReducePlan p = plan_reduce(x, {}, false, "norm");
  const Tensor xf = cast_raw(x, float_dtype(x.dtype()));
  Tensor ss = to_out(reduce_keep(ReduceOp::sum_squares, xf, p, xf.dtype(), 0.0), p);
  Tensor out = new_empty({}, xf.dtype(), x.device());
  backend_of(x).unary(UnaryOp::sqrt, ss, out, 0, 0);
  return record(
      "norm", out, {x},
      [sx = SavedTensor(xf), so = SavedTensor(out)](const TensorList& g, const NeedsGrad&) {
        // d ||x|| / d x = x / ||x||; 0 at x = 0 (the subgradient PyTorch picks).
        Tensor n = so.get();
        Tensor scale = where(eq(n, 0.0), zeros_like(n), div(g[0], n));
        return TensorList{mul(sx.get(), scale)};
      });
}

// ------------------------------------------------------------------------------ any, all
Tensor any(const Tensor& x) {
  GRADUS_PROFILE_OP("any");
  check_defined("any", {&x});
  const ReducePlan p = plan_reduce(x, {}, false, "any");
  return to_out(reduce_keep(ReduceOp::any, cast_raw(x, DType::boolean), p, DType::boolean, 0.0), p);
}

Tensor all(const Tensor& x) {
  GRADUS_PROFILE_OP("all");
  check_defined("all", {&x});
  const ReducePlan p = plan_reduce(x, {}, false, "all");
  return to_out(reduce_keep(ReduceOp::all, cast_raw(x, DType::boolean), p, DType::boolean, 1.0), p);
}

// ------------------------------------------------------------------------------ Tensor methods
Tensor Tensor::sum() const {
  return gradus::sum(*this);
}
Tensor Tensor::mean() const {
  return gradus::mean(*this);
}
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const {
  return gradus::sum(*this, dims, keepdim);
}
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const {
  return gradus::mean(*this, dims, keepdim);
}
Tensor Tensor::argmax(int64_t dim, bool keepdim) const {
  return gradus::argmax(*this, dim, keepdim);
}

}  // namespace gradus
