// Rotary position embeddings (RoPE): the cos/sin tables and their application to queries and keys.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/common.h"

namespace gradus {

using namespace ops;

std::pair<Tensor, Tensor> rotary_tables(int64_t positions, int64_t head_dim, double theta,
                                        TensorOptions options) {
  GRADUS_CHECK(positions >= 0, ValueError, "rotary_tables: positions must be >= 0, got ",
               positions);
  GRADUS_CHECK(head_dim > 0 && head_dim % 2 == 0, ValueError,
               "rotary_tables: head_dim must be positive and even, got ", head_dim);
  GRADUS_CHECK(std::isfinite(theta) && theta > 0, ValueError,
               "rotary_tables: theta must be positive, got ", theta);
  const int64_t half = head_dim / 2;
  std::vector<double> c(static_cast<size_t>(positions * half));
  std::vector<double> s(c.size());
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq =
        1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
    for (int64_t p = 0; p < positions; ++p) {
      const double angle = static_cast<double>(p) * inv_freq;
      c[static_cast<size_t>(p * half + i)] = std::cos(angle);
      s[static_cast<size_t>(p * half + i)] = std::sin(angle);
    }
  }
  const TensorOptions f64{.dtype = DType::f64};
  return {from_vector(c, {positions, half}, f64).to(options.device, options.dtype),
          from_vector(s, {positions, half}, f64).to(options.device, options.dtype)};
}

namespace {
// x [..., T, D] as the kernels' [B, H, T, D] view: a 4-D tensor with a unit-stride last dim as it
// is (the heads of a [B, T, H, D] projection, transposed), anything else as a contiguous copy.
Tensor as_bhtd(const Tensor& x) {
  if (x.dim() == 4 && x.stride(3) == 1) return x;
  const Tensor c = contiguous_raw(x);
  const int64_t t = x.size(-2), d = x.size(-1);
  return c.as_strided_raw({x.numel() / std::max<int64_t>(t * d, 1), 1, t, d}, {t * d, t * d, d, 1},
                          c.offset());
}

// The rotation of x by the tables' angles (or minus them), in x's shape. The heads of a
// projection ([B, T, H, D] in memory) come out laid out the same way (new_heads_like), so that
// attention's output and the gradient back to the projection need no copy.
Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse) {
  const Tensor v = as_bhtd(x);
  const Tensor out = new_heads_like(v, v.size(3), x.dtype());
  if (out.numel() > 0) backend_of(x).rotary_embedding(v, cos, sin, inverse, out);
  // x itself as [B, H, T, D]: out is its shape; otherwise out is contiguous, read in x's shape.
  return out.sizes() == x.sizes() ? out
                                  : out.as_strided_raw(x.sizes(), contiguous_strides(x.sizes()), 0);
}
}  // namespace

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  GRADUS_PROFILE_OP("rotary_embedding");
  const char* op = "rotary_embedding";
  check_defined(op, {&x, &cos, &sin});
  check_same_device(op, {&x, &cos, &sin});
  check_floating(op, x);
  GRADUS_CHECK(x.dim() >= 2 && x.size(-1) % 2 == 0, ShapeError,
               "rotary_embedding: x must be [..., T, D] with an even D, got ",
               shape_str(x.sizes()));
  const int64_t t = x.size(-2), half = x.size(-1) / 2;
  for (const Tensor* table : {&cos, &sin}) {
    GRADUS_CHECK(table->dim() == 2 && table->size(0) == t && table->size(1) == half, ShapeError,
                 "rotary_embedding: ", table == &cos ? "cos" : "sin", " must be [", t, ", ", half,
                 "] for x ", shape_str(x.sizes()), ", got ", shape_str(table->sizes()));
    GRADUS_CHECK(!(is_grad_enabled() && table->requires_grad()), ValueError,
                 "rotary_embedding: ", table == &cos ? "cos" : "sin",
                 " requires a gradient, and the tables are constants (no gradient flows to them)");
  }
  // The tables in x's dtype, contiguous (a no-op for the cached ones of nn::RotaryCache).
  const Tensor c = contiguous_raw(cast_raw(cos, x.dtype())),
               s = contiguous_raw(cast_raw(sin, x.dtype()));
  const Tensor out = rotate(x, c, s, false);
  // The rotation is orthogonal: its backward is the rotation by minus the angle.
  return record(op, out, {x},
                [sc = SavedTensor(c), ss = SavedTensor(s)](const TensorList& g, const NeedsGrad&) {
                  return TensorList{rotate(g[0], sc.get(), ss.get(), true)};
                });
}

}  // namespace gradus
