// Host-side staging shared by the CUDA backend's kernels that need contiguous operands: inputs
// are made contiguous in the kernel's dtype, outputs go through a contiguous temporary when the
// caller's tensor is strided.
#pragma once

#include <utility>

#include "backend/cuda/cuda_backend.h"

namespace gradus::backend::cuda {

// t itself when it is contiguous and of `dtype`, else a contiguous copy in `dtype`. An undefined
// (optional) tensor stays undefined.
inline Tensor contiguous_as(CudaBackend& be, const Tensor& t, DType dtype) {
  if (!t.defined() || (t.is_contiguous() && t.dtype() == dtype)) return t;
  Tensor c = empty(t.sizes(), {dtype, t.device()});
  be.copy(t, c);
  return c;
}
inline Tensor contiguous_as(CudaBackend& be, const Tensor& t) {
  return t.defined() ? contiguous_as(be, t, t.dtype()) : t;
}

// Runs fn(target) with target = out when it is contiguous, else a temporary copied back into out.
template <typename F>
void into_contiguous(CudaBackend& be, const Tensor& out, F&& fn) {
  if (out.is_contiguous()) {
    std::forward<F>(fn)(out);
    return;
  }
  Tensor tmp = empty(out.sizes(), {out.dtype(), out.device()});
  std::forward<F>(fn)(tmp);
  be.copy(tmp, out);
}

}  // namespace gradus::backend::cuda
