// Matrix products: matmul (NumPy rules: 1-D, 2-D, batched with broadcast batch dims), mm, bmm and
// linear (the hot path of MLP training).
//
// Everything funnels into the backend's batched strided GEMM. Operands are passed in whatever
// layout they already have: a transposed view (column-major) is handed over as the untransposed
// matrix plus a trans flag, so x.t() or a weight [out, in] never gets copied. Only layouts BLAS
// cannot describe (both strides non-unit, unmergeable broadcast batch dims) are materialised.
#include <algorithm>

#include "gradus/core/kernel_counts.h"
#include "ops/autocast.h"
#include "ops/common.h"

namespace gradus {
namespace ops {
namespace {

using backend::GemmArgs;

// One GEMM operand as the backend wants it: stored [B, R, C] with unit stride on the last axis
// and a row stride >= C; `trans` says whether the product uses its transpose.
struct GemmOperand {
  Tensor t;
  bool trans;
};

// t: a [B, R, C] raw view holding the matrices op(t) should use with `trans`.
GemmOperand gemm_operand(const Tensor& t, bool trans) {
  const Shape& sz = t.sizes();
  const Shape& st = t.strides();
  const int64_t rows = sz[1], cols = sz[2];
  // Size-1 axes may carry any stride; each layout test below picks the one it needs.
  const bool row_major =
      (cols == 1 || st[2] == 1) && (rows == 1 || st[1] >= std::max<int64_t>(cols, 1));
  if (row_major) {
    return {t.as_strided_raw(sz, {st[0], rows == 1 ? std::max<int64_t>(cols, 1) : st[1], 1},
                             t.offset()),
            trans};
  }
  const bool col_major =
      (rows == 1 || st[1] == 1) && (cols == 1 || st[2] >= std::max<int64_t>(rows, 1));
  if (col_major) {
    // A column-major [R, C] matrix is a row-major [C, R] one, used transposed.
    return {
        t.as_strided_raw({sz[0], cols, rows},
                         {st[0], cols == 1 ? std::max<int64_t>(rows, 1) : st[2], 1}, t.offset()),
        !trans};
  }
  return {contiguous_raw(t), trans};
}

// Collapses the batch dims of t ([batch..., R, C], already broadcast to the batch shape) into one
// axis; copies t when the batch dims cannot share a single stride.
Tensor merge_batch(const Tensor& t, int64_t nb) {
  int64_t batch = 1;
  for (int64_t i = 0; i < nb; ++i) batch *= t.size(i);
  int64_t batch_stride = 0, expect = -1;
  bool mergeable = true;
  for (int64_t i = nb - 1; i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (expect >= 0 && t.stride(i) != expect) {
      mergeable = false;
      break;
    }
    if (expect < 0) batch_stride = t.stride(i);
    expect = t.stride(i) * t.size(i);
  }
  Tensor src = mergeable ? t : contiguous_raw(t);
  if (!mergeable) batch_stride = src.size(nb) * src.size(nb + 1);
  return src.as_strided_raw({batch, src.size(nb), src.size(nb + 1)},
                            {batch_stride, src.stride(nb), src.stride(nb + 1)}, src.offset());
}

// out [B, M, N] = op(a) @ op(b) (+ bias), or with accumulate, out += op(a) @ op(b) (no bias).
// a, b: [B, *, *] raw views; K is the shared extent.
void gemm_into(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& out,
               int64_t k, const Tensor& bias, bool accumulate = false) {
  if (out.numel() == 0) return;
  Backend& be = backend_of(out);
  if (k == 0 && accumulate) return;  // nothing to add
  if (k == 0) {                      // an empty sum: zeros, plus the bias
    if (bias.defined()) {
      be.copy(broadcast_raw(bias, out.sizes()), out);
    } else {
      be.fill(out, 0.0);
    }
    return;
  }
  GemmOperand oa = gemm_operand(a, trans_a), ob = gemm_operand(b, trans_b);
  GemmArgs args;
  args.trans_a = oa.trans;
  args.trans_b = ob.trans;
  args.beta = accumulate ? 1.0 : 0.0;
  Tensor bias_c;
  if (bias.defined()) {
    bias_c = contiguous_raw(bias);
    args.bias = &bias_c;
  }
  be.gemm(oa.t, ob.t, out, args);
}

void check_matmul_dtypes(const char* op, const Tensor& a, const Tensor& b) {
  GRADUS_CHECK(is_floating(a.dtype()) && is_floating(b.dtype()), DTypeError, op,
               ": only floating-point tensors are supported, got ", dtype_name(a.dtype()), " @ ",
               dtype_name(b.dtype()), " (convert with .to(DType::f32))");
  GRADUS_CHECK(a.dtype() == b.dtype(), DTypeError, op, ": dtypes differ: ", dtype_name(a.dtype()),
               " @ ", dtype_name(b.dtype()), " (convert one with .to(dtype))");
}

Tensor matmul_impl(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, {&a, &b});
  check_same_device(op, {&a, &b});
  GRADUS_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, op,
               ": both arguments need at least 1 dimension, got shapes ", shape_str(a.sizes()),
               " and ", shape_str(b.sizes()));
  check_matmul_dtypes(op, a, b);
  // 1-D operands become matrices: a [K] -> [1, K], b [K] -> [K, 1]; the extra axis is dropped
  // from the result.
  const Tensor al =
      a.dim() == 1
          ? a.as_strided_raw({1, a.size(0)}, {a.size(0) * a.stride(0), a.stride(0)}, a.offset())
          : a;
  const Tensor bl =
      b.dim() == 1 ? b.as_strided_raw({b.size(0), 1}, {b.stride(0), 1}, b.offset()) : b;
  const int64_t m = al.size(-2), k = al.size(-1), n = bl.size(-1);
  GRADUS_CHECK(k == bl.size(-2), ShapeError, op,
               ": inner dimensions differ: ", shape_str(a.sizes()), " @ ", shape_str(b.sizes()),
               " (", k, " vs ", bl.size(-2), ")");
  const Shape a_batch(al.sizes().begin(), al.sizes().end() - 2);
  const Shape b_batch(bl.sizes().begin(), bl.sizes().end() - 2);
  Shape batch;
  {
    const size_t nb = std::max(a_batch.size(), b_batch.size());
    batch.resize(nb);
    for (size_t i = 0; i < nb; ++i) {
      const int64_t da = i < nb - a_batch.size() ? 1 : a_batch[i - (nb - a_batch.size())];
      const int64_t db = i < nb - b_batch.size() ? 1 : b_batch[i - (nb - b_batch.size())];
      GRADUS_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": batch dimensions ",
                   shape_str(a_batch), " and ", shape_str(b_batch),
                   " cannot be broadcast together (shapes ", shape_str(a.sizes()), " @ ",
                   shape_str(b.sizes()), ")");
      batch[i] = da == 1 ? db : da;
    }
  }
  const int64_t nb = static_cast<int64_t>(batch.size());
  Shape full = batch, a_full = batch, b_full = batch;
  full.insert(full.end(), {m, n});
  a_full.insert(a_full.end(), {m, k});
  b_full.insert(b_full.end(), {k, n});

  Tensor out = new_empty({shape_numel(batch), m, n}, a.dtype(), a.device());
  if (out.numel() > 0) {
    gemm_into(merge_batch(broadcast_raw(al, a_full), nb), false,
              merge_batch(broadcast_raw(bl, b_full), nb), false, out, k, Tensor());
  }
  Shape result = batch;
  if (a.dim() > 1) result.push_back(m);
  if (b.dim() > 1) result.push_back(n);
  out = out.as_strided_raw(result, contiguous_strides(result), 0);

  return record(
      op, out, {a, b},
      [sa = SavedTensor(a), sb = SavedTensor(b), a_lift = al.sizes(), b_lift = bl.sizes(),
       ma = InputMeta(a), mb = InputMeta(b), full](const TensorList& g, const NeedsGrad& needs) {
        // dA = dC @ B^T and dB = A^T @ dC on the lifted, broadcast shapes, then summed
        // over broadcast batch dims and reshaped back to the inputs' shapes.
        Tensor gf = g[0].reshape(full);
        Tensor ga, gb;
        if (needs[0]) {
          Tensor bt = sb.get().reshape(b_lift).transpose(-1, -2);
          ga = sum_to(matmul(gf, bt), a_lift).reshape(ma.shape);
        }
        if (needs[1]) {
          Tensor at = sa.get().reshape(a_lift).transpose(-1, -2);
          gb = sum_to(matmul(at, gf), b_lift).reshape(mb.shape);
        }
        return TensorList{ga, gb};
      });
}

// A [1, rows, cols] raw view of a 2-D (any strides) or contiguous tensor flattened to rows.
Tensor as_matrix3(const Tensor& t, int64_t rows, int64_t cols) {
  if (t.dim() == 2)
    return t.as_strided_raw({1, rows, cols}, {0, t.stride(0), t.stride(1)}, t.offset());
  const Tensor c = contiguous_raw(t);
  return c.as_strided_raw({1, rows, cols}, {0, cols, 1}, c.offset());
}

}  // namespace
}  // namespace ops

using namespace ops;

Tensor matmul(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("matmul");
  if (AutocastInputs cast{"matmul", {&a, &b}}) return matmul(cast[0], cast[1]);
  return matmul_impl("matmul", a, b);
}

Tensor mm(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("mm");
  if (AutocastInputs cast{"mm", {&a, &b}}) return mm(cast[0], cast[1]);
  check_defined("mm", {&a, &b});
  GRADUS_CHECK(a.dim() == 2 && b.dim() == 2, ShapeError, "mm: expected 2-D matrices, got ",
               shape_str(a.sizes()), " and ", shape_str(b.sizes()),
               " (use matmul for vectors or batches)");
  return matmul_impl("mm", a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("bmm");
  if (AutocastInputs cast{"bmm", {&a, &b}}) return bmm(cast[0], cast[1]);
  check_defined("bmm", {&a, &b});
  GRADUS_CHECK(a.dim() == 3 && b.dim() == 3, ShapeError, "bmm: expected 3-D batches, got ",
               shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  GRADUS_CHECK(a.size(0) == b.size(0), ShapeError,
               "bmm: batch sizes differ: ", shape_str(a.sizes()), " @ ", shape_str(b.sizes()), " (",
               a.size(0), " vs ", b.size(0), "; bmm does not broadcast, use matmul)");
  return matmul_impl("bmm", a, b);
}

namespace ops {
namespace {
// linear's argument checks (also each map of linears).
void check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_defined(op, {&x, &weight});
  check_same_device(op, {&x, &weight, &bias});
  GRADUS_CHECK(weight.dim() == 2, ShapeError, op,
               ": weight must be 2-D [out_features, in_features], got ", shape_str(weight.sizes()));
  GRADUS_CHECK(x.dim() >= 1, ShapeError, op,
               ": input must have at least 1 dimension [..., in_features], got a 0-d tensor");
  check_matmul_dtypes(op, x, weight);
  const int64_t in_f = weight.size(1), out_f = weight.size(0);
  GRADUS_CHECK(x.size(-1) == in_f, ShapeError, op, ": input features differ: input ",
               shape_str(x.sizes()), " vs weight ", shape_str(weight.sizes()), " (", x.size(-1),
               " vs ", in_f, ")");
  if (bias.defined()) {
    GRADUS_CHECK(bias.dim() == 1 && bias.size(0) == out_f, ShapeError, op,
                 ": bias must have shape [", out_f, "] to match weight ", shape_str(weight.sizes()),
                 ", got ", shape_str(bias.sizes()));
    GRADUS_CHECK(bias.dtype() == x.dtype(), DTypeError, op, ": bias dtype ",
                 dtype_name(bias.dtype()), " differs from the input's ", dtype_name(x.dtype()));
  }
}

// x3 [1, rows, in] @ W^T (+ bias) as a new tensor of shape lead + [out]; W is passed as stored
// with trans_b (no transpose copy).
Tensor project(const Tensor& x3, const Tensor& w3, const Tensor& bias, const Shape& lead) {
  const int64_t rows = x3.size(1), in_f = x3.size(2), out_f = w3.size(1);
  Tensor out = new_empty({1, rows, out_f}, x3.dtype(), x3.device());
  gemm_into(x3, false, w3, true, out, in_f, bias);
  Shape out_shape = lead;
  out_shape.push_back(out_f);
  return out.as_strided_raw(out_shape, contiguous_strides(out_shape), 0);
}

// dx [rows, in] = sum_i g_i [rows, out_i] @ W_i [out_i, in], accumulated in one buffer by the
// GEMMs (beta = 1 after the first), in x's shape.
Tensor input_grad(const TensorList& g3s, const std::vector<Tensor>& w3s, const InputMeta& mx,
                  int64_t rows, int64_t in_f) {
  gradus::detail::count_kernel("linear.input_grad");
  Tensor gx = new_empty({1, rows, in_f}, g3s[0].dtype(), g3s[0].device());
  for (size_t i = 0; i < g3s.size(); ++i) {
    gemm_into(g3s[i], false, w3s[i], false, gx, w3s[i].size(1), Tensor(), i > 0);
  }
  return gx.as_strided_raw(mx.shape, contiguous_strides(mx.shape), 0);
}

// dW [out, in] = g^T [out, rows] @ x [rows, in].
Tensor weight_grad(const Tensor& g3, const Tensor& x3, int64_t rows, int64_t out_f, int64_t in_f) {
  gradus::detail::count_kernel("linear.weight_grad");
  Tensor gw = new_empty({1, out_f, in_f}, g3.dtype(), g3.device());
  gemm_into(g3, true, x3, false, gw, rows, Tensor());
  return gw.as_strided_raw({out_f, in_f}, {in_f, 1}, 0);
}

// db [out] = column sums of g.
Tensor bias_grad(const Tensor& g3, int64_t rows, int64_t out_f) {
  return sum(g3.as_strided_raw({rows, out_f}, {g3.stride(1), g3.stride(2)}, g3.offset()), {0});
}
}  // namespace
}  // namespace ops

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  GRADUS_PROFILE_OP("linear");
  if (AutocastInputs cast{"linear", {&x, &weight, &bias}}) {
    return linear(cast[0], cast[1], cast[2]);
  }
  check_linear("linear", x, weight, bias);
  const int64_t in_f = weight.size(1), out_f = weight.size(0);
  const Shape lead(x.sizes().begin(), x.sizes().end() - 1);
  const int64_t rows = shape_numel(lead);
  const Tensor x3 = as_matrix3(x, rows, in_f);
  const Tensor w3 = as_matrix3(weight, out_f, in_f);
  return record("linear", project(x3, w3, bias, lead), {x, weight, bias},
                [sx = SavedTensor(x3), sw = SavedTensor(w3), mx = InputMeta(x), rows, in_f, out_f](
                    const TensorList& g, const NeedsGrad& needs) {
                  const Tensor g3 = as_matrix3(g[0], rows, out_f);
                  TensorList grads(3);
                  if (needs[0]) grads[0] = input_grad({g3}, {sw.get()}, mx, rows, in_f);
                  if (needs[1]) grads[1] = weight_grad(g3, sx.get(), rows, out_f, in_f);
                  if (needs[2]) grads[2] = bias_grad(g3, rows, out_f);
                  return grads;
                });
}

std::vector<Tensor> linears(const Tensor& x, const std::vector<Tensor>& weights,
                            const std::vector<Tensor>& biases) {
  GRADUS_PROFILE_OP("linears");
  const size_t n = weights.size();
  GRADUS_CHECK(n > 0, ValueError, "linears: no weights");
  GRADUS_CHECK(biases.empty() || biases.size() == n, ValueError, "linears: ", biases.size(),
               " biases for ", n, " weights (give none, or one per weight: undefined for none)");
  const auto bias = [&](size_t i) { return biases.empty() ? Tensor() : biases[i]; };
  if (autocast_state().enabled) {  // each map autocast as linear is
    std::vector<Tensor> outs;
    for (size_t i = 0; i < n; ++i) outs.push_back(linear(x, weights[i], bias(i)));
    return outs;
  }
  for (size_t i = 0; i < n; ++i) check_linear("linears", x, weights[i], bias(i));
  const int64_t in_f = x.size(-1);
  const Shape lead(x.sizes().begin(), x.sizes().end() - 1);
  const int64_t rows = shape_numel(lead);
  const Tensor x3 = as_matrix3(x, rows, in_f);
  TensorList inputs{x}, outs;
  std::vector<SavedTensor> saved_w;
  for (size_t i = 0; i < n; ++i) {
    const Tensor w3 = as_matrix3(weights[i], weights[i].size(0), in_f);
    outs.push_back(project(x3, w3, bias(i), lead));
    inputs.push_back(weights[i]);
    saved_w.emplace_back(w3);
  }
  for (size_t i = 0; i < n; ++i) inputs.push_back(bias(i));

  return record_multi("linears", std::move(outs), inputs,
                      [sx = SavedTensor(x3), saved_w = std::move(saved_w), mx = InputMeta(x), rows,
                       in_f](const TensorList& g, const NeedsGrad& needs) {
                        const size_t maps = saved_w.size();
                        TensorList g3s, w3s;
                        for (size_t i = 0; i < maps; ++i) {
                          w3s.push_back(saved_w[i].get());  // [1, out_i, in]
                          g3s.push_back(as_matrix3(g[i], rows, w3s[i].size(1)));
                        }
                        TensorList grads(1 + 2 * maps);
                        if (needs[0]) grads[0] = input_grad(g3s, w3s, mx, rows, in_f);
                        for (size_t i = 0; i < maps; ++i) {
                          if (needs[1 + i])
                            grads[1 + i] =
                                weight_grad(g3s[i], sx.get(), rows, w3s[i].size(1), in_f);
                          if (needs[1 + maps + i])
                            grads[1 + maps + i] = bias_grad(g3s[i], rows, w3s[i].size(1));
                        }
                        return grads;
                      });
}

}  // namespace gradus
