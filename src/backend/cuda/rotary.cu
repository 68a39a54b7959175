// Rotary position embedding ("rotate half" layout) over [B, H, T, D], the device twin of
// src/backend/cpu/rotary.cpp: one thread per (row, pair), math in float (double for f64).
#include "backend/cuda/common.cuh"

namespace gradus::backend::cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(kThreads)
    rotary_kernel(RotaryArgs a, const T* x, const T* cos, const T* sin, T* out) {
  using C = compute_t<T>;
  const int64_t half = a.d / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.b * a.h * a.t * half) return;
  const int64_t pair = i % half, row = i / half;
  const int64_t ti = row % a.t, hi = (row / a.t) % a.h, bi = row / (a.t * a.h);
  const T* xr = x + bi * a.sb + hi * a.sh + ti * a.st;
  const C x1 = load(xr + pair), x2 = load(xr + pair + half);
  const C c = load(cos + ti * half + pair);
  const C s = a.inverse ? -load(sin + ti * half + pair) : load(sin + ti * half + pair);
  T* o = out + bi * a.osb + hi * a.osh + ti * a.ost;
  o[pair] = convert<T>(x1 * c - x2 * s);
  o[pair + half] = convert<T>(x2 * c + x1 * s);
}

}  // namespace

void launch_rotary_embedding(const RotaryArgs& a, const void* x, const void* cos, const void* sin,
                             void* out, cudaStream_t stream) {
  const int64_t n = a.b * a.h * a.t * (a.d / 2);
  if (n == 0) return;
  dispatch_float(a.dtype, "rotary_embedding", [&](auto tag) {
    using T = decltype(tag);
    rotary_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        a, static_cast<const T*>(x), static_cast<const T*>(cos), static_cast<const T*>(sin),
        static_cast<T*>(out));
  });
  GRADUS_CUDA_CHECK_LAUNCH("rotary_embedding");
}

}  // namespace gradus::backend::cuda
