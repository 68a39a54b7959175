// Rotary position embeddings (RoPE): the cos/sin tables and their application to queries and keys.
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
  }
  const int64_t last = x.dim() - 1;
  const Tensor c = cos.to(x.dtype()), s = sin.to(x.dtype());
  const Tensor x1 = x.narrow(last, 0, half), x2 = x.narrow(last, half, half);
  return cat({sub(mul(x1, c), mul(x2, s)), add(mul(x2, c), mul(x1, s))}, last);
}

}  // namespace gradus
