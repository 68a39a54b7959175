// Scaled dot-product attention (one fused kernel per backend, see backend.h's AttentionArgs) and
// the masking helpers attention code needs: masked_fill, tril, triu.
#include <cmath>

#include "ops/autocast.h"
#include "ops/common.h"

namespace gradus {
namespace ops {
namespace {

// Leading (batch) dims folded into one: t [..., T, D] -> contiguous [B, T, D].
Tensor fold(const Tensor& t, int64_t batch) {
  const Tensor c = contiguous_raw(t);
  return c.as_strided_raw({batch, t.size(-2), t.size(-1)}, {t.size(-2) * t.size(-1), t.size(-1), 1},
                          c.offset());
}

int64_t check_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  const char* op = "scaled_dot_product_attention";
  check_defined(op, {&q, &k, &v});
  check_same_device(op, {&q, &k, &v});
  check_floating(op, q, "query");
  GRADUS_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), DTypeError, op,
               ": query, key and value must share a dtype, got ", dtype_name(q.dtype()), ", ",
               dtype_name(k.dtype()), ", ", dtype_name(v.dtype()));
  GRADUS_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), ShapeError, op,
               ": query, key and value must have one rank >= 2 ([..., T, D]), got ",
               shape_str(q.sizes()), ", ", shape_str(k.sizes()), ", ", shape_str(v.sizes()));
  int64_t batch = 1;
  for (int64_t i = 0; i + 2 < q.dim(); ++i) {
    GRADUS_CHECK(k.size(i) == q.size(i) && v.size(i) == q.size(i), ShapeError, op,
                 ": batch dims differ: query ", shape_str(q.sizes()), ", key ",
                 shape_str(k.sizes()), ", value ", shape_str(v.sizes()));
    batch *= q.size(i);
  }
  GRADUS_CHECK(k.size(-1) == q.size(-1) && q.size(-1) > 0, ShapeError, op,
               ": query and key need the same positive head size (last dim), got ",
               shape_str(q.sizes()), " and ", shape_str(k.sizes()));
  GRADUS_CHECK(v.size(-2) == k.size(-2) && v.size(-1) > 0, ShapeError, op,
               ": value needs the key's length and a positive last dim, got key ",
               shape_str(k.sizes()), ", value ", shape_str(v.sizes()));
  return batch;
}

}  // namespace
}  // namespace ops

using namespace ops;

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& o) {
  GRADUS_PROFILE_OP("scaled_dot_product_attention");
  if (AutocastInputs cast{"scaled_dot_product_attention", {&q, &k, &v}}) {
    return scaled_dot_product_attention(cast[0], cast[1], cast[2], o);
  }
  const int64_t batch = check_attention(q, k, v);
  GRADUS_CHECK(std::isfinite(o.dropout_p) && o.dropout_p >= 0.0 && o.dropout_p < 1.0, ValueError,
               "scaled_dot_product_attention: dropout_p must be in [0, 1), got ", o.dropout_p);
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  GRADUS_CHECK(std::isfinite(scale), ValueError,
               "scaled_dot_product_attention: scale must be finite, got ", scale);
  backend::AttentionArgs args{
      .scale = scale, .causal = o.causal, .dropout_p = o.dropout_p, .rng = {}};
  const int64_t tq = q.size(-2), tk = k.size(-2);
  if (o.dropout_p > 0) {
    Generator& g = o.generator != nullptr ? *o.generator : default_generator();
    // The blocks dropout() would reserve for the [batch, Tq, Tk] probabilities.
    const int64_t rows = q.dim() > 3 ? q.size(0) : batch;
    const RowDraw draw = reserve_rows(g, rows, rows > 0 ? batch / rows * tq * tk : 0,
                                      "scaled_dot_product_attention");
    GRADUS_CHECK(draw.lane == 0, ValueError,
                 "scaled_dot_product_attention: dropout in a micro-batch whose first probability "
                 "is not at a multiple of 4 in the whole batch's stream (heads x Tq x Tk = ",
                 batch / rows * tq * tk, " per sample) is not supported; use a micro-batch size ",
                 "that makes it one");
    args.rng = draw.state;
  }
  const Tensor qf = fold(q, batch), kf = fold(k, batch), vf = fold(v, batch);
  const DType stat = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor out3 = new_empty({batch, tq, v.size(-1)}, q.dtype(), q.device());
  const Tensor lse = new_empty({batch, tq}, stat, q.device());
  backend_of(q).attention(qf, kf, vf, out3, lse, args);
  Shape out_shape = q.sizes();
  out_shape.back() = v.size(-1);
  // The kernels work on the folded [batch, T, D] tensors; the backward saves those (the output
  // is a view of out3's storage, so an in-place change to it is still caught).
  auto unfold = [](const Tensor& t, const Shape& shape) {
    return t.as_strided_raw(shape, contiguous_strides(shape), 0);
  };
  return record("scaled_dot_product_attention", unfold(out3, out_shape), {q, k, v},
                [args, unfold, sq = SavedTensor(qf), sk = SavedTensor(kf), sv = SavedTensor(vf),
                 so = SavedTensor(out3), sl = SavedTensor(lse), qs = q.sizes(), ks = k.sizes(),
                 vs = v.sizes()](const TensorList& g, const NeedsGrad&) {
                  const Tensor qv = sq.get(), kv = sk.get(), vv = sv.get();
                  Tensor gq = new_empty(qv.sizes(), qv.dtype(), qv.device());
                  Tensor gk = new_empty(kv.sizes(), kv.dtype(), kv.device());
                  Tensor gv = new_empty(vv.sizes(), vv.dtype(), vv.device());
                  const Tensor go = fold(cast_raw(g[0], qv.dtype()), qv.size(0));
                  backend_of(qv).attention_backward(go, qv, kv, vv, so.get(), sl.get(), gq, gk, gv,
                                                    args);
                  return TensorList{unfold(gq, qs), unfold(gk, ks), unfold(gv, vs)};
                });
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  GRADUS_PROFILE_OP("masked_fill");
  check_defined("masked_fill", {&x, &mask});
  GRADUS_CHECK(mask.dtype() == DType::boolean, DTypeError, "masked_fill: mask must be bool, got ",
               dtype_name(mask.dtype()));
  return where(mask, full_like(x, value), x);
}

namespace {
// keep[i, j] for the last two dims of x: j - i <= diagonal (tril) or >= diagonal (triu).
Tensor band_mask(const char* op, const Tensor& x, int64_t diagonal, bool lower) {
  check_defined(op, {&x});
  GRADUS_CHECK(x.dim() >= 2, ShapeError, op, ": input needs at least 2 dims, got ",
               shape_str(x.sizes()));
  const TensorOptions idx{.dtype = DType::i64, .device = x.device()};
  const Tensor rows = arange(0, static_cast<double>(x.size(-2)), 1, idx).reshape({x.size(-2), 1});
  const Tensor cols = arange(0, static_cast<double>(x.size(-1)), 1, idx).reshape({1, x.size(-1)});
  const Tensor offset = sub(cols, rows);
  return lower ? le(offset, static_cast<double>(diagonal))
               : ge(offset, static_cast<double>(diagonal));
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) {
  return where(band_mask("tril", x, diagonal, true), x, 0.0);
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  return where(band_mask("triu", x, diagonal, false), x, 0.0);
}

}  // namespace gradus
