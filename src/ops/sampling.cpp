// topk and multinomial: what text generation samples with. Both work on host copies (a sort and a
// cumulative sum per row over at most a vocabulary); generation calls them once per token, where
// they are not the cost. topk's values come from gather, so they carry the gradient.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/common.h"

namespace gradus {

using namespace ops;

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim) {
  GRADUS_PROFILE_OP("topk");
  check_defined("topk", {&x});
  const int64_t d = normalize_dim(dim, std::max<int64_t>(x.dim(), 1), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  GRADUS_CHECK(k >= 0 && k <= n, ValueError, "topk: k must be in [0, ", n, "] for dim ", d, " of ",
               shape_str(x.sizes()), ", got ", k);
  GRADUS_CHECK(x.dtype() != DType::boolean, DTypeError, "topk: bool input is not ordered");
  // Rows along `dim`: move it last and read the values as doubles on the host.
  const Tensor xt = x.dim() == 0 ? x.reshape({1}) : x.transpose(d, -1);
  const Tensor host = xt.detach().to(Device::cpu(), DType::f64).contiguous();
  const std::vector<double> v = host.to_vector<double>();
  const int64_t rows = n == 0 ? 0 : static_cast<int64_t>(v.size()) / n;
  std::vector<int64_t> picked(static_cast<size_t>(rows * k));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = v.data() + r * n;
    std::iota(order.begin(), order.end(), int64_t{0});
    // NaN counts as the largest value (PyTorch's order); ties keep the lower index first.
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [row](int64_t a, int64_t b) {
      const bool na = std::isnan(row[a]), nb = std::isnan(row[b]);
      if (na != nb) return na;
      if (!na && row[a] != row[b]) return row[a] > row[b];
      return a < b;
    });
    std::copy(order.begin(), order.begin() + k, picked.begin() + r * k);
  }
  Shape idx_shape = xt.sizes();
  if (!idx_shape.empty()) idx_shape.back() = k;
  Tensor idx = from_vector<int64_t>(picked, idx_shape, {.dtype = DType::i64}).to(x.device());
  if (x.dim() == 0) {  // one element: itself (0-dim) for k = 1, nothing ([0]) for k = 0
    return k == 0 ? ValuesIndices{x.reshape({1}).narrow(0, 0, 0), idx}
                  : ValuesIndices{x, idx.reshape({})};
  }
  idx = idx.transpose(d, -1).contiguous();
  return {gather(x, d, idx), idx};
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, Generator* gen) {
  GRADUS_PROFILE_OP("multinomial");
  check_defined("multinomial", {&probs});
  check_floating("multinomial", probs, "probs");
  check_dim("multinomial", probs, {1, 2}, "probs");
  GRADUS_CHECK(num_samples > 0, ValueError, "multinomial: num_samples must be positive, got ",
               num_samples);
  const int64_t classes = probs.size(-1);
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  GRADUS_CHECK(classes > 0, ShapeError, "multinomial: probs ", shape_str(probs.sizes()),
               " has no categories");
  const std::vector<double> p =
      probs.detach().to(Device::cpu(), DType::f64).contiguous().to_vector<double>();
  Generator& g = gen != nullptr ? *gen : default_generator();
  const uint64_t draws = static_cast<uint64_t>(rows * num_samples);
  const PhiloxState st = g.reserve((draws + 3) / 4);
  std::vector<int64_t> out(draws);
  std::vector<double> cdf(static_cast<size_t>(classes));
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0;
    for (int64_t c = 0; c < classes; ++c) {
      const double w = p[r * classes + c];
      GRADUS_CHECK(std::isfinite(w) && w >= 0, ValueError,
                   "multinomial: probabilities must be finite and non-negative, row ", r, " has ",
                   w, " at ", c);
      total += w;
      cdf[c] = total;
    }
    GRADUS_CHECK(total > 0, ValueError, "multinomial: row ", r, " of probs sums to 0");
    for (int64_t s = 0; s < num_samples; ++s) {
      const uint64_t i = static_cast<uint64_t>(r * num_samples + s);
      const double u = uint_to_unit_float(philox4x32(st.offset + i / 4, st.seed)[i % 4]) * total;
      // The first class whose cumulative weight exceeds u: never one of weight 0. Rounding can
      // put u at the total; then it is the last class of positive weight.
      int64_t c = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      if (c == classes) {
        c = classes - 1;
        while (p[r * classes + c] == 0) --c;
      }
      out[i] = c;
    }
  }
  Shape shape = probs.dim() == 2 ? Shape{rows, num_samples} : Shape{num_samples};
  return from_vector<int64_t>(out, shape, {.dtype = DType::i64}).to(probs.device());
}

}  // namespace gradus
