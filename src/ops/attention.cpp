// Scaled dot-product attention (one fused kernel per backend, see backend.h's AttentionArgs) and
// the masking helpers attention code needs: masked_fill, tril, triu.
#include <array>
#include <cmath>

#include "ops/autocast.h"
#include "ops/common.h"

namespace gradus {
namespace ops {
namespace {

// t [..., T, D] as the kernels' [B, H, T, D] view, without a copy where the layout allows: a 4-D
// tensor as it is (e.g. the heads of a [B, T, 3C] projection, transposed), 2-D and 3-D ones with
// unit leading dims. A copy is made for more dims, a last dim that is not unit-stride, or rows
// that overlap (a row stride below the row: BLAS needs ld >= D).
Tensor as_bhtd(const Tensor& t) {
  const int64_t rows = t.size(-2), width = t.size(-1);
  const bool rows_ok = rows <= 1 || t.stride(-2) >= width;
  const Tensor c =
      t.dim() <= 4 && (t.stride(-1) == 1 || width <= 1) && rows_ok ? t : contiguous_raw(t);
  const int64_t st = rows <= 1 ? width : c.stride(-2);  // one row: any stride will do
  switch (c.dim()) {
    case 4:
      return c.as_strided_raw(c.sizes(), {c.stride(0), c.stride(1), st, 1}, c.offset());
    case 3:
      return c.as_strided_raw({c.size(0), 1, rows, width}, {c.stride(0), 0, st, 1}, c.offset());
    case 2:
      return c.as_strided_raw({1, 1, rows, width}, {0, 0, st, 1}, c.offset());
    default: {
      const int64_t batch = rows * width > 0 ? c.numel() / (rows * width) : 0;
      return c.as_strided_raw({batch, 1, rows, width}, {rows * width, 0, width, 1}, c.offset());
    }
  }
}

// A new [B, H, T, D] tensor laid out like `like` (new_heads_like), and the view of it in the
// shape of the user's tensor `shape`.
struct Buffer {
  Tensor bhtd, user;
};
Buffer new_like(const Tensor& like, const Shape& shape, int64_t width) {
  const Tensor bhtd = new_heads_like(like, width, like.dtype());
  // A 4-D user shape is the view itself; otherwise H = 1 and the memory is contiguous.
  const Tensor user =
      shape.size() == 4 ? bhtd : bhtd.as_strided_raw(shape, contiguous_strides(shape), 0);
  return {bhtd, user};
}

// True when q, k and v are the heads of one [B, T, 3C] projection split in three (the layout of a
// transformer's c_attn output): one storage, the same [B, H, T, D] strides with rows 3C apart and
// k, v starting C and 2C after q. Their gradients then go into one [B, T, 3C] buffer, which the
// split's backward takes as it is instead of concatenating three.
bool packed_projection(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.dim() != 4 || k.sizes() != q.sizes() || v.sizes() != q.sizes()) return false;
  if (k.impl()->storage().get() != q.impl()->storage().get() ||
      v.impl()->storage().get() != q.impl()->storage().get()) {
    return false;
  }
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3), c = h * d;
  const Shape strides{t * 3 * c, d, 3 * c, 1};
  return b > 0 && t > 0 && c > 0 && q.strides() == strides && k.strides() == strides &&
         v.strides() == strides && k.offset() == q.offset() + c && v.offset() == q.offset() + 2 * c;
}

// Gradient buffers for the packed q, k, v above: three [B, H, T, D] views of one [B, T, 3C].
std::array<Tensor, 3> new_packed_grads(const Tensor& q) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3), c = h * d;
  const Tensor storage = new_empty({b, t, 3 * c}, q.dtype(), q.device());
  std::array<Tensor, 3> views;
  for (int64_t i = 0; i < 3; ++i) {
    views[static_cast<size_t>(i)] = storage.as_strided_raw(q.sizes(), q.strides(), i * c);
  }
  return views;
}

int64_t check_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool gqa) {
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
  GRADUS_CHECK(!gqa || q.dim() == 4, ShapeError, op,
               ": enable_gqa needs 4-D [B, H, T, D] query, key and value, got ",
               shape_str(q.sizes()));
  int64_t batch = 1;
  for (int64_t i = 0; i + 2 < q.dim(); ++i) {
    if (gqa && i == 1) {  // the heads: k and v's divide q's
      GRADUS_CHECK(
          k.size(1) == v.size(1) && k.size(1) > 0 && q.size(1) % k.size(1) == 0, ShapeError, op,
          ": with enable_gqa, key and value need the same number of heads (dim 1), "
          "dividing the query's: query ",
          shape_str(q.sizes()), ", key ", shape_str(k.sizes()), ", value ", shape_str(v.sizes()));
    } else {
      GRADUS_CHECK(k.size(i) == q.size(i) && v.size(i) == q.size(i), ShapeError, op,
                   ": batch dims differ: query ", shape_str(q.sizes()), ", key ",
                   shape_str(k.sizes()), ", value ", shape_str(v.sizes()),
                   q.dim() == 4 && i == 1 ? " (for fewer key/value heads, set enable_gqa)" : "");
    }
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
  const int64_t batch = check_attention(q, k, v, o.enable_gqa);
  if (o.enable_gqa && k.size(1) != q.size(1) && !backend_of(q).grouped_query_attention()) {
    // Each key/value head repeated for the query heads it serves (transformers' repeat_kv).
    const auto repeat = [&](const Tensor& t) {
      const int64_t b = t.size(0), h = t.size(1), n = t.size(2), w = t.size(3);
      return t.unsqueeze(2).expand({b, h, q.size(1) / h, n, w}).reshape({b, q.size(1), n, w});
    };
    AttentionOptions same = o;
    same.enable_gqa = false;
    return scaled_dot_product_attention(q, repeat(k), repeat(v), same);
  }
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
  const Tensor q4 = as_bhtd(q), k4 = as_bhtd(k), v4 = as_bhtd(v);
  const DType stat = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Shape out_shape = q.sizes();
  out_shape.back() = v.size(-1);
  const Buffer out = new_like(q4, out_shape, v.size(-1));
  const Tensor lse = new_empty({batch, tq}, stat, q.device());
  backend_of(q).attention(q4, k4, v4, out.bhtd, lse, args);
  // The backward saves the [B, H, T, D] views (the output is a view of out's storage, so an
  // in-place change to it is still caught). The gradients are laid out like their inputs, so
  // that the heads of a projection get their gradients back without a copy.
  return record("scaled_dot_product_attention", out.user, {q, k, v},
                [args, sq = SavedTensor(q4), sk = SavedTensor(k4), sv = SavedTensor(v4),
                 so = SavedTensor(out.bhtd), sl = SavedTensor(lse), qs = q.sizes(), ks = k.sizes(),
                 vs = v.sizes(), packed = q.dim() == 4 && packed_projection(q4, k4, v4)](
                    const TensorList& g, const NeedsGrad&) {
                  const Tensor qv = sq.get(), kv = sk.get(), vv = sv.get();
                  const Tensor go = as_bhtd(cast_raw(g[0], qv.dtype()));
                  if (packed) {  // the 4-D views are the user's tensors
                    const std::array<Tensor, 3> gqkv = new_packed_grads(qv);
                    backend_of(qv).attention_backward(go, qv, kv, vv, so.get(), sl.get(), gqkv[0],
                                                      gqkv[1], gqkv[2], args);
                    return TensorList{gqkv[0], gqkv[1], gqkv[2]};
                  }
                  const Buffer gq = new_like(qv, qs, qv.size(3));
                  const Buffer gk = new_like(kv, ks, kv.size(3));
                  const Buffer gv = new_like(vv, vs, vv.size(3));
                  backend_of(qv).attention_backward(go, qv, kv, vv, so.get(), sl.get(), gq.bhtd,
                                                    gk.bhtd, gv.bhtd, args);
                  return TensorList{gq.user, gk.user, gv.user};
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
