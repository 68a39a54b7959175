// Host helpers that turn gradus Tensors into the kernels' plain iterators (kernels.h): dims merged
// where every operand's strides allow, size-1 dims dropped, and problems with more than
// kMaxDims dims or 2^31 elements cut into pieces the 32-bit kernels can index.
#pragma once

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "backend/common/layout.h"
#include "backend/cuda/kernels.h"
#include "gradus/core/tensor.h"

namespace gradus::backend::cuda {

// Operands that all have `shape` (operand 0 first); strides in elements, outermost first.
template <int N>
struct Layout {
  std::vector<int64_t> sizes;
  std::vector<std::array<int64_t, N>> strides;
  std::array<char*, N> data{};
  std::array<DType, N> dtype{};
  int64_t numel = 1;
};

template <int N>
Layout<N> make_layout(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  std::array<int64_t, N> unit;
  unit.fill(1);
  common::CoalescedDims<N> dims = common::coalesce_dims<N>(shape, ts, unit);  // element strides
  Layout<N> l;
  l.sizes = std::move(dims.sizes);
  l.strides = std::move(dims.strides);
  l.numel = shape_numel(shape);
  for (int k = 0; k < N; ++k) {
    l.data[k] = static_cast<char*>(ts[k]->raw_data());
    l.dtype[k] = ts[k]->dtype();
  }
  return l;
}

inline constexpr int64_t kMaxKernelElements = (int64_t{1} << 31) - 1;

// Calls fn(const Iter<N>&) on pieces of the layout that fit the kernels' limits.
template <int N, typename F>
void for_each_piece(const Layout<N>& l, const F& fn) {
  const int nd = static_cast<int>(l.sizes.size());
  if (l.numel == 0) return;
  if (nd <= kMaxDims && l.numel <= kMaxKernelElements) {
    Iter<N> it;
    it.ndim = nd;
    it.numel = l.numel;
    for (int d = 0; d < nd; ++d) {
      it.sizes[d] = l.sizes[d];
      for (int k = 0; k < N; ++k) it.strides[k][d] = l.strides[d][k];
    }
    for (int k = 0; k < N; ++k) {
      it.data[k] = l.data[k];
      it.dtype[k] = l.dtype[k];
    }
    fn(it);
    return;
  }
  // Cut the outermost dim: into chunks if the rest is small enough, else one index at a time.
  Layout<N> sub = l;
  const int64_t outer = l.sizes[0];
  const int64_t inner = l.numel / outer;
  int64_t chunk = 1;
  if (nd <= kMaxDims && inner <= kMaxKernelElements) chunk = kMaxKernelElements / inner;
  if (chunk == 1) {
    sub.sizes.erase(sub.sizes.begin());
    sub.strides.erase(sub.strides.begin());
  }
  for (int64_t start = 0; start < outer; start += chunk) {
    const int64_t len = std::min(chunk, outer - start);
    if (chunk > 1) sub.sizes[0] = len;
    sub.numel = len * inner;
    for (int k = 0; k < N; ++k) {
      sub.data[k] =
          l.data[k] + start * l.strides[0][k] * static_cast<int64_t>(dtype_size(l.dtype[k]));
    }
    for_each_piece<N>(sub, fn);
  }
}

}  // namespace gradus::backend::cuda
