// Shapes and strides: small vectors of int64, printed like PyTorch ([32, 784]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradus {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);
// Row-major (C-contiguous) strides for `shape`, in elements.
Shape contiguous_strides(const Shape& shape);
// Wraps a possibly negative axis into [0, ndim); throws IndexError naming `op` if out of range.
int normalize_dim(int64_t dim, int64_t ndim, const char* op);
// The shape two shapes broadcast to; throws ShapeError naming `op` if they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace gradus
