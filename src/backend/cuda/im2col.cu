// im2col / col2im for the convolution path that does not use cuDNN (builds without it, or
// GRADUS_CONV_IM2COL=1): the products themselves run as batched GEMMs on cuBLASLt.
#include "backend/cuda/common.cuh"

namespace gradus::backend::cuda {
namespace {

// col[n, (c * kh + i) * kw + j, oh * ow_ + ow] = x[n, g * cg + c, oh*sh - ph + i*dh, ow*sw - pw +
// j*dw]
template <typename T>
__global__ void __launch_bounds__(kThreads)
    im2col_kernel(const T* x, T* col, ConvGeom g, int64_t group, int64_t total) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t p_count = g.oh * g.ow, rows = g.cg * g.kh * g.kw;
  const int64_t p = idx % p_count, row = (idx / p_count) % rows, n = idx / (p_count * rows);
  const int64_t ow = p % g.ow, oh = p / g.ow;
  const int64_t j = row % g.kw, i = (row / g.kw) % g.kh, c = row / (g.kw * g.kh);
  const int64_t h = oh * g.sh - g.ph + i * g.dh, w = ow * g.sw - g.pw + j * g.dw;
  const bool inside = h >= 0 && h < g.h && w >= 0 && w < g.w;
  col[idx] = inside ? x[((n * g.c + group * g.cg + c) * g.h + h) * g.w + w] : convert<T>(0.0f);
}

// Gather form of col2im: each input element sums the column entries that read it, in a fixed
// order (no atomics, deterministic).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    col2im_kernel(const T* col, T* gx, ConvGeom g, int64_t group, int64_t total) {
  using C = compute_t<T>;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t w = idx % g.w, h = (idx / g.w) % g.h, c = (idx / (g.w * g.h)) % g.cg;
  const int64_t n = idx / (g.w * g.h * g.cg);
  const int64_t p_count = g.oh * g.ow, rows = g.cg * g.kh * g.kw;
  const T* cn = col + n * rows * p_count;
  C s = 0;
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t hh = h + g.ph - i * g.dh;
    if (hh < 0 || hh % g.sh != 0) continue;
    const int64_t oh = hh / g.sh;
    if (oh >= g.oh) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t ww = w + g.pw - j * g.dw;
      if (ww < 0 || ww % g.sw != 0) continue;
      const int64_t ow = ww / g.sw;
      if (ow >= g.ow) continue;
      s += load(cn + ((c * g.kh + i) * g.kw + j) * p_count + oh * g.ow + ow);
    }
  }
  gx[((n * g.c + group * g.cg + c) * g.h + h) * g.w + w] = convert<T>(s);
}

}  // namespace

void launch_im2col(const void* x, void* col, DType dtype, int64_t images, int64_t g,
                   const ConvGeom& geom, cudaStream_t stream) {
  const int64_t total = images * geom.cg * geom.kh * geom.kw * geom.oh * geom.ow;
  if (total == 0) return;
  dispatch_float(dtype, "conv2d (im2col)", [&](auto tag) {
    using T = decltype(tag);
    im2col_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(col), geom, g, total);
  });
  GRADUS_CUDA_CHECK_LAUNCH("conv2d (im2col)");
}

void launch_col2im(const void* col, void* grad_x, DType dtype, int64_t images, int64_t g,
                   const ConvGeom& geom, cudaStream_t stream) {
  const int64_t total = images * geom.cg * geom.h * geom.w;
  if (total == 0) return;
  dispatch_float(dtype, "conv2d backward (col2im)", [&](auto tag) {
    using T = decltype(tag);
    col2im_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(col), static_cast<T*>(grad_x), geom, g, total);
  });
  GRADUS_CUDA_CHECK_LAUNCH("conv2d backward (col2im)");
}

}  // namespace gradus::backend::cuda
