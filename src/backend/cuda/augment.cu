// Image augmentation on CUDA (Backend::augment_images), the CPU kernel's twin
// (src/backend/cpu/augment.cpp): same per-sample parameters (augment_params.h) and the same
// normalisation, one subtraction and one division written as explicit round-to-nearest
// intrinsics so the compiler cannot contract them differently. Results are bit-identical.
//
// One block per [H, W] plane: thread 0 derives the sample's crop offsets and flip once, the block
// then streams the plane (reads gather along the flip, writes are coalesced).
#include "backend/augment_params.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace gradus::backend::cuda {
namespace {

__device__ __forceinline__ float normalise(float v, float m, float s) {
  return __fdiv_rn(__fsub_rn(v, m), s);
}
__device__ __forceinline__ double normalise(double v, double m, double s) {
  return __ddiv_rn(__dsub_rn(v, m), s);
}

// grid.x = n * c planes; the plane's sample is blockIdx.x / c.
template <typename T, bool kNormalise>
__global__ void __launch_bounds__(kThreads) augment_kernel(const T* x, T* out, AugmentLaunch a) {
  __shared__ CropFlip p;
  const int64_t plane = static_cast<int64_t>(blockIdx.x);
  if (threadIdx.x == 0) p = crop_flip_params(a.rng, plane / a.c, a.padding, a.flip_p);
  __syncthreads();
  const int h = static_cast<int>(a.h), w = static_cast<int>(a.w), pad = static_cast<int>(a.padding);
  const int64_t size = a.h * a.w;
  const T* src = x + plane * size;
  T* dst = out + plane * size;
  using C = compute_t<T>;
  C m = C(0), s = C(1);
  if constexpr (kNormalise) {
    const int ch = static_cast<int>(plane % a.c);
    m = static_cast<C>(a.mean[ch]);
    s = static_cast<C>(a.std[ch]);
  }
  for (int k = static_cast<int>(threadIdx.x); k < size; k += blockDim.x) {
    const int i = k / w, j = k - i * w;
    const int y = i + p.dy - pad;
    const int xs = (p.flip ? w - 1 - j : j) + p.dx - pad;
    const bool inside = y >= 0 && y < h && xs >= 0 && xs < w;
    if constexpr (kNormalise) {
      const C v = inside ? load(src + y * w + xs) : C(0);
      dst[k] = convert<T>(normalise(v, m, s));
    } else {
      dst[k] = inside ? src[y * w + xs] : T{};
    }
  }
}

template <typename T, bool kNormalise>
void launch_typed(const AugmentLaunch& a, cudaStream_t stream) {
  const unsigned int planes = static_cast<unsigned int>(a.n * a.c);
  augment_kernel<T, kNormalise>
      <<<planes, kThreads, 0, stream>>>(static_cast<const T*>(a.x), static_cast<T*>(a.out), a);
}

}  // namespace

void launch_augment_images(const AugmentLaunch& a, cudaStream_t stream) {
  if (a.n * a.c == 0 || a.h * a.w == 0) return;
  if (a.dtype == DType::u8) {
    launch_typed<uint8_t, false>(a, stream);
  } else {
    dispatch_float(a.dtype, "augment_images", [&](auto tag) {
      using T = decltype(tag);
      if (a.normalise) {
        launch_typed<T, true>(a, stream);
      } else {
        launch_typed<T, false>(a, stream);
      }
    });
  }
  GRADUS_CUDA_CHECK_LAUNCH("augment_images");
}

}  // namespace gradus::backend::cuda
