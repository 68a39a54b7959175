// Softmax, log-softmax and the losses: cross_entropy (fused kernel), nll_loss, mse_loss,
// binary_cross_entropy_with_logits.
//
// The fused kernels work on a contiguous [rows, cols] layout with the class / softmax axis last.
// Any other axis is moved last by a permuted copy, and results are handed back as permuted views
// of the kernel's output (no second copy).
#include <algorithm>
#include <utility>

#include "ops/autocast.h"
#include "ops/common.h"

namespace gradus {
namespace ops {
namespace {

using backend::ReduceOp;

// ------------------------------------------------------------------------ axis-last layouts
// A permutation moving `axis` to the end, and the views it produces.
struct AxisLast {
  std::vector<int64_t> perm;  // perm[i] = source axis of permuted axis i
  Shape permuted;             // shape after the permutation
  int64_t rows = 1, cols = 1;
};

AxisLast axis_last(const Shape& shape, int64_t axis) {
  AxisLast a;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i != axis) a.perm.push_back(i);
  }
  a.perm.push_back(axis);
  for (int64_t p : a.perm) a.permuted.push_back(shape[p]);
  a.cols = shape[axis];
  for (int64_t i = 0; i + 1 < static_cast<int64_t>(a.permuted.size()); ++i) a.rows *= a.permuted[i];
  return a;
}

// t (shape as in the original layout) as a contiguous [rows, cols] tensor with the axis last.
Tensor to_rows(const Tensor& t, const AxisLast& a) {
  Shape strides;
  for (int64_t p : a.perm) strides.push_back(t.stride(p));
  const Tensor c = contiguous_raw(t.as_strided_raw(a.permuted, strides, t.offset()));
  return c.as_strided_raw({a.rows, a.cols}, {a.cols, 1}, c.offset());
}

// A contiguous [rows, cols] result viewed back in the original axis order with `shape`.
Tensor from_rows(const Tensor& rows, const AxisLast& a, const Shape& shape) {
  const Shape cs = contiguous_strides(a.permuted);
  Shape strides(shape.size(), 0);
  for (size_t i = 0; i < a.perm.size(); ++i) strides[a.perm[i]] = cs[i];
  return rows.as_strided_raw(shape, strides, rows.offset());
}

Tensor lift(const Tensor& t) {
  return t.dim() == 0 ? t.as_strided_raw({1}, {1}, t.offset()) : t;
}

Tensor softmax_impl(const char* name, const Tensor& x, int64_t dim, bool log) {
  check_defined(name, {&x});
  check_floating(name, x);
  const int64_t d = normalize_dim(dim, x.dim(), name);
  const Tensor xl = lift(x);
  const AxisLast a = axis_last(xl.sizes(), d);
  Tensor y = new_empty({a.rows, a.cols}, x.dtype(), x.device());
  if (y.numel() > 0) backend_of(x).softmax(to_rows(xl, a), y, log);
  Tensor out = from_rows(y, a, x.sizes().empty() ? Shape{1} : x.sizes());
  if (x.dim() == 0) out = out.as_strided_raw({}, {}, 0);
  return record(
      name, out, {x},
      [a, log, shape = x.sizes(), sy = SavedTensor(y)](const TensorList& g, const NeedsGrad&) {
        const Tensor yv = sy.get();
        Tensor gx = new_empty(yv.sizes(), yv.dtype(), yv.device());
        if (gx.numel() > 0) {
          backend_of(gx).softmax_backward(to_rows(lift(cast_raw(g[0], yv.dtype())), a), yv, gx,
                                          log);
        }
        if (shape.empty()) return TensorList{gx.as_strided_raw({}, {}, 0)};
        return TensorList{from_rows(gx, a, shape)};
      });
}

// ------------------------------------------------------------------------ class-index targets
// Logits/log-probs [N, C, d...] (or [C]) and targets [N, d...] (or []) flattened to [rows, C]
// and [rows] with checks shared by cross_entropy and nll_loss.
struct ClassTargets {
  AxisLast layout;  // classes moved last
  Tensor target;    // contiguous int64 [rows]
  Tensor weight;    // [C] in the input's dtype, or undefined
  int64_t classes = 0;
};

ClassTargets class_targets(const char* op, const Tensor& input, const Tensor& target,
                           const CrossEntropyOptions& o) {
  check_defined(op, {&input, &target});
  check_same_device(op, {&input, &target, &o.weight});
  check_floating(op, input);
  GRADUS_CHECK(!is_floating(target.dtype()), DTypeError, op,
               ": class-probability (floating-point) targets are not supported, got a ",
               dtype_name(target.dtype()),
               " target; pass class indices as an int64 tensor of shape [N] (or [N, d...])");
  GRADUS_CHECK(target.dtype() == DType::i64 || target.dtype() == DType::i32, DTypeError, op,
               ": target must hold class indices as int64 (or int32), got ",
               dtype_name(target.dtype()));
  GRADUS_CHECK(input.dim() >= 1, ShapeError, op,
               ": input must be [N, C], [N, C, d...] or [C], got a 0-d tensor");
  const int64_t class_axis = input.dim() == 1 ? 0 : 1;
  Shape expected = input.sizes();
  expected.erase(expected.begin() + class_axis);
  GRADUS_CHECK(target.sizes() == expected, ShapeError, op, ": target shape ",
               shape_str(target.sizes()), " does not match input ", shape_str(input.sizes()),
               " (expected target shape ", shape_str(expected), ")");
  ClassTargets ct;
  ct.classes = input.size(class_axis);
  GRADUS_CHECK(ct.classes > 0, ShapeError, op, ": input ", shape_str(input.sizes()),
               " has zero classes");
  ct.layout = axis_last(input.sizes(), class_axis);
  const Tensor tc = contiguous_raw(cast_raw(target, DType::i64));
  ct.target = tc.as_strided_raw({ct.layout.rows}, {1}, tc.offset());
  if (o.weight.defined()) {
    GRADUS_CHECK(o.weight.dim() == 1 && o.weight.size(0) == ct.classes, ShapeError, op,
                 ": weight must have shape [", ct.classes, "] (one per class), got ",
                 shape_str(o.weight.sizes()));
    check_floating(op, o.weight, "weight");
    ct.weight = contiguous_raw(cast_raw(o.weight, input.dtype()));
  }
  if (ct.target.numel() > 0) {  // on a GPU: checked on the device, reported at the next sync
    backend_of(ct.target).check_index_range(
        ct.target, {.op = op, .what = "target", .size = ct.classes, .allowed = o.ignore_index});
  }
  return ct;
}

// weight[t] for every row (0 where t == ignore_index), or the 0/1 validity mask without weights.
Tensor row_weights(const ClassTargets& ct, int64_t ignore_index, DType dtype) {
  const Tensor valid = ne(ct.target, static_cast<double>(ignore_index));
  if (!ct.weight.defined()) return valid.to(dtype);
  const Tensor safe = where(valid, ct.target, 0.0);
  Tensor w = new_empty({ct.layout.rows, 1}, ct.weight.dtype(), ct.weight.device());
  if (w.numel() > 0) {
    backend_of(w).index_select_rows(ct.weight.as_strided_raw({ct.classes, 1}, {1, 1}, 0), safe, w);
  }
  return where(valid, w.as_strided_raw({ct.layout.rows}, {1}, 0), 0.0).to(dtype);
}

Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none:
      return loss;
    case Reduction::sum:
      return sum(loss);
    case Reduction::mean:
      return mean(loss);
  }
  return loss;
}

}  // namespace
}  // namespace ops

using namespace ops;

Tensor softmax(const Tensor& x, int64_t dim) {
  GRADUS_PROFILE_OP("softmax");
  if (AutocastInputs cast{"softmax", {&x}}) return softmax(cast[0], dim);
  return softmax_impl("softmax", x, dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  GRADUS_PROFILE_OP("log_softmax");
  if (AutocastInputs cast{"log_softmax", {&x}}) return log_softmax(cast[0], dim);
  return softmax_impl("log_softmax", x, dim, true);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  GRADUS_PROFILE_OP("cross_entropy");
  if (AutocastInputs cast{"cross_entropy", {&logits, &target}}) {
    return cross_entropy(cast[0], cast[1], o);
  }
  const char* op = "cross_entropy";
  const ClassTargets ct = class_targets(op, logits, target, o);
  GRADUS_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, ValueError, op,
               ": label_smoothing must be in [0, 1], got ", o.label_smoothing);
  const DType loss_dtype = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const int64_t rows = ct.layout.rows;
  const Tensor l2 = to_rows(logits, ct.layout);
  Tensor loss = new_empty({rows}, loss_dtype, logits.device());
  Tensor lse = new_empty({rows}, loss_dtype, logits.device());
  if (rows > 0) {
    backend_of(logits).cross_entropy(l2, ct.target, ct.weight, o.ignore_index, o.label_smoothing,
                                     loss, lse);
  }
  // 'mean' divides by the summed weight of the non-ignored targets (their count without
  // weights), like PyTorch; it stays on the device (no host sync).
  Tensor denom;
  Tensor out;
  if (o.reduction == Reduction::none) {
    out = loss.as_strided_raw(target.sizes(), contiguous_strides(target.sizes()), 0);
  } else if (o.reduction == Reduction::sum) {
    out = sum(loss);
  } else {
    denom = sum(row_weights(ct, o.ignore_index, loss_dtype));
    out = div(sum(loss), denom);
  }
  out = cast_raw(out, logits.dtype());
  return record(op, out, {logits},
                [layout = ct.layout, st = SavedTensor(ct.target), sw = SavedTensor(ct.weight),
                 l2s = SavedTensor(l2), lses = SavedTensor(lse), denom, reduction = o.reduction,
                 ignore = o.ignore_index, smoothing = o.label_smoothing, rows, loss_dtype,
                 shape = logits.sizes()](const TensorList& g, const NeedsGrad&) {
                  // Per-row upstream gradient of the unreduced loss.
                  Tensor gl = cast_raw(g[0], loss_dtype);
                  if (reduction == Reduction::mean) gl = div(gl, denom);
                  gl = reduction == Reduction::none ? contiguous_raw(gl.reshape({rows}))
                                                    : contiguous_raw(broadcast_raw(gl, {rows}));
                  const Tensor l2v = l2s.get();
                  Tensor gx = new_empty(l2v.sizes(), l2v.dtype(), l2v.device());
                  if (gx.numel() > 0) {
                    backend_of(gx).cross_entropy_backward(gl, l2v, st.get(), sw.get(), ignore,
                                                          smoothing, lses.get(), gx);
                  }
                  return TensorList{from_rows(gx, layout, shape)};
                });
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& o) {
  GRADUS_PROFILE_OP("nll_loss");
  if (AutocastInputs cast{"nll_loss", {&log_probs, &target}}) {
    return nll_loss(cast[0], cast[1], o);
  }
  const char* op = "nll_loss";
  GRADUS_CHECK(o.label_smoothing == 0.0, ValueError, op,
               ": label_smoothing is only supported by cross_entropy");
  const ClassTargets ct = class_targets(op, log_probs, target, o);
  const int64_t rows = ct.layout.rows;
  // Differentiable composition: classes last, pick each row's target log-probability.
  const Tensor lp = log_probs.permute(ct.layout.perm).reshape({rows, ct.classes});
  const Tensor valid = ne(ct.target, static_cast<double>(o.ignore_index));
  const Tensor safe = where(valid, ct.target, 0.0);
  const Tensor picked = gather(lp, 1, safe.reshape({rows, 1})).reshape({rows});
  const Tensor w = row_weights(ct, o.ignore_index, log_probs.dtype());
  const Tensor loss = neg(mul(picked, w));
  switch (o.reduction) {
    case Reduction::none:
      return loss.reshape(target.sizes());
    case Reduction::sum:
      return sum(loss);
    case Reduction::mean:
      return div(sum(loss), sum(w));
  }
  return loss;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  GRADUS_PROFILE_OP("mse_loss");
  if (AutocastInputs cast{"mse_loss", {&input, &target}}) {
    return mse_loss(cast[0], cast[1], reduction);
  }
  check_defined("mse_loss", {&input, &target});
  check_same_device("mse_loss", {&input, &target});
  check_floating("mse_loss", input);
  check_floating("mse_loss", target, "target");
  // PyTorch broadcasts with a warning; a shape mismatch in a loss is nearly always a bug
  // ([N, 1] vs [N] silently makes an [N, N] loss), so it is an error here.
  GRADUS_CHECK(input.sizes() == target.sizes(), ShapeError, "mse_loss: input ",
               shape_str(input.sizes()), " and target ", shape_str(target.sizes()),
               " have different shapes (reshape one of them)");
  return reduce_loss(square(sub(input, target)), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction, const Tensor& pos_weight) {
  GRADUS_PROFILE_OP("binary_cross_entropy_with_logits");
  if (AutocastInputs cast{"binary_cross_entropy_with_logits", {&logits, &target, &pos_weight}}) {
    return binary_cross_entropy_with_logits(cast[0], cast[1], reduction, cast[2]);
  }
  const char* op = "binary_cross_entropy_with_logits";
  check_defined(op, {&logits, &target});
  check_same_device(op, {&logits, &target, &pos_weight});
  check_floating(op, logits, "logits");
  check_floating(op, target, "target (probabilities in [0, 1])");
  GRADUS_CHECK(logits.sizes() == target.sizes(), ShapeError, op, ": logits ",
               shape_str(logits.sizes()), " and target ", shape_str(target.sizes()),
               " have different shapes");
  // Stable form: log(1 + e^-|x|) never overflows, max(-x, 0) carries the large-|x| part.
  const Tensor softplus_neg_abs = log1p(exp(neg(abs(logits))));
  const Tensor relu_neg = clamp(neg(logits), 0.0, std::nullopt);
  Tensor loss;
  if (!pos_weight.defined()) {
    // (1 - t) x + log(1 + e^-x)  ==  max(x, 0) - x t + log1p(e^-|x|)
    loss = add(sub(clamp(logits, 0.0, std::nullopt), mul(logits, target)), softplus_neg_abs);
  } else {
    check_floating(op, pos_weight, "pos_weight");
    GRADUS_CHECK(broadcast_shapes(pos_weight.sizes(), logits.sizes(), op) == logits.sizes(),
                 ShapeError, op, ": pos_weight ", shape_str(pos_weight.sizes()),
                 " must broadcast to the logits' shape ", shape_str(logits.sizes()));
    // (1 - t) x + (1 + (pos_weight - 1) t) log(1 + e^-x)
    const Tensor log_weight = add(mul(sub(pos_weight, 1.0), target), 1.0);
    loss = add(mul(1.0 - target, logits), mul(log_weight, add(softplus_neg_abs, relu_neg)));
  }
  return reduce_loss(loss, reduction);
}

}  // namespace gradus
