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
  // Zero elements if any dim is 0, whatever the others (which may come from a file and be
  // huge); otherwise the product must fit in int64.
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) overflow = overflow || __builtin_mul_overflow(n, d, &n);
  GRADUS_CHECK(!overflow, ShapeError, "shape ", shape_str(shape),
               " is too large: its element count overflows int64");
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // A shape with a zero dim has no elements, but its other dims still give strides; a file
    // (IDX, safetensors) can declare e.g. [0, 2^31, 2^31, 2^31]: refuse rather than overflow.
    GRADUS_CHECK(!__builtin_mul_overflow(s, shape[i] > 0 ? shape[i] : 1, &s), ShapeError, "shape ",
                 shape_str(shape), " is too large: its strides overflow int64");
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
