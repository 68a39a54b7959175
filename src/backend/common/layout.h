// Device-neutral layout helpers both backends use: merging the dims of a strided iteration, and
// describing a strided matrix to a BLAS (row-major with a leading dimension, or its transpose).
// Header-only and free of device code, so it is included from .cpp and .cu files alike.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::backend::common {

// ------------------------------------------------------------------------- dimension merging
// N operands walked together over one shape, with size-1 dims dropped and adjacent dims merged
// wherever every operand's strides line up (a contiguous or uniformly broadcast tensor of any
// rank becomes one dim). Strides are per dim, per operand, outermost dim first.
template <int N>
struct CoalescedDims {
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, N>> strides;
};

// The operands all have shape `shape` (operand 0 is usually the output). Each operand's strides
// are multiplied by its `scale` (1: element strides; the element size: byte strides); merging
// does not depend on the scale.
template <int N>
CoalescedDims<N> coalesce_dims(const Shape& shape, const std::array<const Tensor*, N>& ts,
                               const std::array<int64_t, N>& scale) {
  CoalescedDims<N> c;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    std::array<int64_t, N> s;
    for (int k = 0; k < N; ++k) s[k] = ts[k]->strides()[d] * scale[k];
    if (!c.sizes.empty()) {
      const int64_t inner_size = c.sizes.back();
      const auto& inner = c.strides.back();
      bool mergeable = true;
      for (int k = 0; k < N; ++k) mergeable = mergeable && s[k] == inner[k] * inner_size;
      if (mergeable) {
        c.sizes.back() *= shape[d];
        continue;
      }
    }
    c.sizes.push_back(shape[d]);
    c.strides.push_back(s);
  }
  std::reverse(c.sizes.begin(), c.sizes.end());
  std::reverse(c.strides.begin(), c.strides.end());
  return c;
}

// One axis of a reduction: its size and the input's and output's strides along it (the output's
// is 0 on reduced axes).
struct ReduceAxis {
  int64_t size, xs, os;
};

// The kept (or the reduced) axes of a reduction, outermost first, with size-1 axes dropped and
// adjacent axes merged where both strides line up.
inline std::vector<ReduceAxis> coalesce_axes(const std::vector<ReduceAxis>& axes) {
  std::vector<ReduceAxis> out;
  for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
    if (it->size == 1) continue;
    if (!out.empty() && it->xs == out.back().xs * out.back().size &&
        it->os == out.back().os * out.back().size) {
      out.back().size *= it->size;
      continue;
    }
    out.push_back(*it);
  }
  return {out.rbegin(), out.rend()};
}

// ------------------------------------------------------------------------ matrices for BLAS
// A 2-D or 3-D GEMM operand seen as [batch, rows, cols] with element strides; the batch stride
// is 0 when there is one matrix.
struct MatrixView {
  int64_t batch, rows, cols, bs, rs, cs;
};

inline MatrixView matrix_view(const Tensor& t) {
  if (t.dim() == 2) return {1, t.size(0), t.size(1), 0, t.stride(0), t.stride(1)};
  return {t.size(0),   t.size(1),  t.size(2), t.size(0) == 1 ? 0 : t.stride(0),
          t.stride(1), t.stride(2)};
}

// How a BLAS sees one stored [rows, cols] matrix: row-major with leading dimension `ld`, or,
// when `transposed`, the row-major [cols, rows] matrix that is its transpose (a column-major
// operand); the caller then flips the operand's transpose flag.
struct BlasMatrix {
  bool transposed = false;
  int64_t ld = 0;
};

// False when neither layout fits (e.g. both strides > 1): the operand must be copied to a
// contiguous buffer first. Degenerate extents (a single row or column) take the smallest valid
// leading dimension.
inline bool blas_matrix(const MatrixView& v, BlasMatrix& m) {
  const int64_t r = v.rows, c = v.cols;
  if ((v.cs == 1 || c == 1) && (r == 1 || v.rs >= std::max<int64_t>(c, 1))) {
    m = {false, r == 1 ? std::max<int64_t>(c, 1) : v.rs};
    return true;
  }
  if ((v.rs == 1 || r == 1) && (c == 1 || v.cs >= std::max<int64_t>(r, 1))) {
    m = {true, c == 1 ? std::max<int64_t>(r, 1) : v.cs};
    return true;
  }
  return false;
}

}  // namespace gradus::backend::common
