#include "gradus/core/shape.h"

#include "gradus/core/error.h"

namespace gradus {

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

int normalize_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t bound = ndim > 0 ? ndim : 1;  // a 0-d tensor accepts dim 0 and -1
  GRADUS_CHECK(dim >= -bound && dim < bound, IndexError, op, ": dimension ", dim,
               " is out of range for a tensor with ", ndim, " dimensions (expected [", -bound, ", ",
               bound - 1, "])");
  return static_cast<int>(dim < 0 ? dim + bound : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    GRADUS_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": shapes ", shape_str(a), " and ",
                 shape_str(b), " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db,
                 ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace gradus
