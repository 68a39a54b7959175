// 2-D max / average / adaptive-average pooling over contiguous planes and their backwards, with
// the CPU backend's window rules (src/backend/cpu/pool.cpp). Forwards: one thread per output.
// Average backwards gather (one thread per input element, windows visited in the CPU's order, so
// float sums match); max backward scatters through the saved indices with atomics, or in
// deterministic mode one thread per plane in output order.
#include "backend/cuda/common.cuh"

namespace gradus::backend::cuda {
namespace {

struct Geom {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool count_include_pad;
  int64_t divisor_override;
};

Geom make_geom(const PoolShape& s, const Pool2dArgs& a) {
  return {s.planes,
          s.h,
          s.w,
          s.oh,
          s.ow,
          a.kernel_h,
          a.kernel_w,
          a.stride_h,
          a.stride_w,
          a.pad_h,
          a.pad_w,
          a.dilation_h,
          a.dilation_w,
          a.count_include_pad,
          a.divisor_override};
}

// ------------------------------------------------------------------------------- max pool
template <typename T>
__global__ void __launch_bounds__(kThreads)
    max_pool_kernel(const T* x, T* y, int64_t* idx, Geom g, bool fast2x2, int64_t total) {
  using C = compute_t<T>;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= total) return;
  const int64_t ow = o % g.ow, oh = (o / g.ow) % g.oh, pl = o / (g.ow * g.oh);
  const T* xp = x + pl * g.h * g.w;
  C best;
  int64_t bi;
  if (fast2x2) {
    // Same comparisons as the CPU's 2x2 path: start from the first value, replace when greater
    // or NaN.
    const int64_t base = 2 * oh * g.w + 2 * ow;
    const int64_t cand[4] = {base, base + 1, base + g.w, base + g.w + 1};
    best = load(xp + base);
    bi = base;
#pragma unroll
    for (int k = 1; k < 4; ++k) {
      const C v = load(xp + cand[k]);
      if (v > best || v != v) {
        best = v;
        bi = cand[k];
      }
    }
  } else {
    int64_t h0 = oh * g.sh - g.ph;
    const int64_t h1 = min(h0 + (g.kh - 1) * g.dh + 1, g.h);
    while (h0 < 0) h0 += g.dh;
    int64_t w0 = ow * g.sw - g.pw;
    const int64_t w1 = min(w0 + (g.kw - 1) * g.dw + 1, g.w);
    while (w0 < 0) w0 += g.dw;
    best = -INFINITY;
    bi = h0 * g.w + w0;
    for (int64_t hh = h0; hh < h1; hh += g.dh) {
      for (int64_t ww = w0; ww < w1; ww += g.dw) {
        const C v = load(xp + hh * g.w + ww);
        // Strictly greater, as on the CPU and in PyTorch: the first of tied maxima keeps the
        // gradient.
        if (v > best || v != v) {
          best = v;
          bi = hh * g.w + ww;
        }
      }
    }
  }
  y[o] = convert<T>(best);
  idx[o] = bi;
}

__device__ __forceinline__ void atomic_add_acc(float* p, float v) {
  atomicAdd(p, v);
}
__device__ __forceinline__ void atomic_add_acc(double* p, double v) {
  atomicAdd(p, v);
}

template <typename T, typename A>
__global__ void __launch_bounds__(kThreads)
    max_pool_backward_kernel(const T* gy, const int64_t* idx, A* acc, int64_t plane_in,
                             int64_t plane_out, int64_t total) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= total) return;
  const int64_t j = idx[o];
  if (j < 0 || j >= plane_in) return;  // out-of-plane indices are skipped, like the CPU
  atomic_add_acc(acc + (o / plane_out) * plane_in + j, static_cast<A>(load(gy + o)));
}

// Deterministic mode: one thread per plane walks its outputs in order and adds into its own
// plane (no other thread writes there), so overlapping windows sum in the same order every run.
template <typename T, typename A>
__global__ void __launch_bounds__(kThreads)
    max_pool_backward_ordered_kernel(const T* gy, const int64_t* idx, A* acc, int64_t plane_in,
                                     int64_t plane_out, int64_t planes) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= planes) return;
  A* dst = acc + p * plane_in;
  for (int64_t o = p * plane_out; o < (p + 1) * plane_out; ++o) {
    const int64_t j = idx[o];
    if (j >= 0 && j < plane_in) dst[j] += static_cast<A>(load(gy + o));
  }
}

// ------------------------------------------------------------------------------- avg pool
struct Window {
  int64_t h0, h1, w0, w1;
  double divisor;
};

__device__ __forceinline__ Window avg_window(int64_t oh, int64_t ow, const Geom& g) {
  int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
  int64_t h1 = min(h0 + g.kh, g.h + g.ph);
  int64_t w1 = min(w0 + g.kw, g.w + g.pw);
  const int64_t pool_size = (h1 - h0) * (w1 - w0);
  h0 = max(h0, int64_t{0});
  w0 = max(w0, int64_t{0});
  h1 = min(h1, g.h);
  w1 = min(w1, g.w);
  double div;
  if (g.divisor_override != 0)
    div = static_cast<double>(g.divisor_override);
  else if (g.count_include_pad)
    div = static_cast<double>(pool_size);
  else
    div = static_cast<double>((h1 - h0) * (w1 - w0));
  return {h0, h1, w0, w1, div};
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    avg_pool_kernel(const T* x, T* y, Geom g, int64_t total) {
  using C = compute_t<T>;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= total) return;
  const int64_t ow = o % g.ow, oh = (o / g.ow) % g.oh, pl = o / (g.ow * g.oh);
  const Window win = avg_window(oh, ow, g);
  if (win.h0 >= win.h1 || win.w0 >= win.w1) {
    y[o] = convert<T>(C(0));
    return;
  }
  const T* xp = x + pl * g.h * g.w;
  C s = 0;
  for (int64_t hh = win.h0; hh < win.h1; ++hh)
    for (int64_t ww = win.w0; ww < win.w1; ++ww) s += load(xp + hh * g.w + ww);
  y[o] = convert<T>(s / static_cast<C>(win.divisor));
}

// Output windows that may cover input row h: oh in [lo, hi].
__device__ __forceinline__ void covering(int64_t h, int64_t k, int64_t stride, int64_t pad,
                                         int64_t out, int64_t& lo, int64_t& hi) {
  // h >= oh * stride - pad  and  h < oh * stride - pad + k
  const int64_t num = h + pad - k + 1;
  lo = num <= 0 ? 0 : (num + stride - 1) / stride;
  hi = min((h + pad) / stride, out - 1);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    avg_pool_backward_kernel(const T* gy, T* gx, Geom g, int64_t total) {
  using C = compute_t<T>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t ww = i % g.w, hh = (i / g.w) % g.h, pl = i / (g.w * g.h);
  const T* gyp = gy + pl * g.oh * g.ow;
  int64_t oh0, oh1, ow0, ow1;
  covering(hh, g.kh, g.sh, g.ph, g.oh, oh0, oh1);
  covering(ww, g.kw, g.sw, g.pw, g.ow, ow0, ow1);
  C s = 0;
  for (int64_t oh = oh0; oh <= oh1; ++oh) {
    for (int64_t ow = ow0; ow <= ow1; ++ow) {
      const Window win = avg_window(oh, ow, g);  // clipped window must contain (hh, ww)
      if (hh < win.h0 || hh >= win.h1 || ww < win.w0 || ww >= win.w1) continue;
      s += static_cast<C>(load(gyp + oh * g.ow + ow) / static_cast<C>(win.divisor));
    }
  }
  gx[i] = convert<T>(s);
}

// ------------------------------------------------------------------------------- adaptive
__device__ __forceinline__ int64_t bin_start(int64_t i, int64_t out, int64_t in) {
  return (i * in) / out;
}
__device__ __forceinline__ int64_t bin_end(int64_t i, int64_t out, int64_t in) {
  return ((i + 1) * in + out - 1) / out;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    adaptive_avg_kernel(const T* x, T* y, PoolShape p, int64_t total) {
  using C = compute_t<T>;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= total) return;
  const int64_t ow = o % p.ow, oh = (o / p.ow) % p.oh, pl = o / (p.ow * p.oh);
  const int64_t h0 = bin_start(oh, p.oh, p.h), h1 = bin_end(oh, p.oh, p.h);
  const int64_t w0 = bin_start(ow, p.ow, p.w), w1 = bin_end(ow, p.ow, p.w);
  const T* xp = x + pl * p.h * p.w;
  C s = 0;
  for (int64_t hh = h0; hh < h1; ++hh)
    for (int64_t ww = w0; ww < w1; ++ww) s += load(xp + hh * p.w + ww);
  y[o] = convert<T>(s / static_cast<C>((h1 - h0) * (w1 - w0)));
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    adaptive_avg_backward_kernel(const T* gy, T* gx, PoolShape p, int64_t total) {
  using C = compute_t<T>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t ww = i % p.w, hh = (i / p.w) % p.h, pl = i / (p.w * p.h);
  const T* gyp = gy + pl * p.oh * p.ow;
  // Bins containing hh: oh in [floor(hh * OH / H), ceil((hh + 1) * OH / H) - 1].
  const int64_t oh0 = (hh * p.oh) / p.h, oh1 = min(((hh + 1) * p.oh + p.h - 1) / p.h - 1, p.oh - 1);
  const int64_t ow0 = (ww * p.ow) / p.w, ow1 = min(((ww + 1) * p.ow + p.w - 1) / p.w - 1, p.ow - 1);
  C s = 0;
  for (int64_t oh = oh0; oh <= oh1; ++oh) {
    const int64_t h0 = bin_start(oh, p.oh, p.h), h1 = bin_end(oh, p.oh, p.h);
    if (hh < h0 || hh >= h1) continue;
    for (int64_t ow = ow0; ow <= ow1; ++ow) {
      const int64_t w0 = bin_start(ow, p.ow, p.w), w1 = bin_end(ow, p.ow, p.w);
      if (ww < w0 || ww >= w1) continue;
      s += load(gyp + oh * p.ow + ow) / static_cast<C>((h1 - h0) * (w1 - w0));
    }
  }
  gx[i] = convert<T>(s);
}

}  // namespace

void launch_max_pool2d(const void* x, void* out, int64_t* indices, DType dtype, const PoolShape& s,
                       const Pool2dArgs& a, cudaStream_t stream) {
  const int64_t total = s.planes * s.oh * s.ow;
  if (total == 0) return;
  const Geom g = make_geom(s, a);
  const bool fast2x2 = a.kernel_h == 2 && a.kernel_w == 2 && a.stride_h == 2 && a.stride_w == 2 &&
                       a.pad_h == 0 && a.pad_w == 0 && a.dilation_h == 1 && a.dilation_w == 1 &&
                       2 * s.oh <= s.h && 2 * s.ow <= s.w;
  dispatch_float(dtype, "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    max_pool_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(out), indices, g, fast2x2, total);
  });
  GRADUS_CUDA_CHECK_LAUNCH("max_pool2d");
}

void launch_max_pool2d_backward(const void* grad_out, const int64_t* indices, void* accum,
                                DType dtype, const PoolShape& s, bool ordered,
                                cudaStream_t stream) {
  const int64_t total = s.planes * s.oh * s.ow;
  if (total == 0) return;
  dispatch_float(dtype, "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    if (ordered) {
      max_pool_backward_ordered_kernel<T, A>
          <<<blocks_for(s.planes, kThreads), kThreads, 0, stream>>>(
              static_cast<const T*>(grad_out), indices, static_cast<A*>(accum), s.h * s.w,
              s.oh * s.ow, s.planes);
    } else {
      max_pool_backward_kernel<T, A><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
          static_cast<const T*>(grad_out), indices, static_cast<A*>(accum), s.h * s.w, s.oh * s.ow,
          total);
    }
  });
  GRADUS_CUDA_CHECK_LAUNCH("max_pool2d_backward");
}

void launch_avg_pool2d(const void* x, void* out, DType dtype, const PoolShape& s,
                       const Pool2dArgs& a, cudaStream_t stream) {
  const int64_t total = s.planes * s.oh * s.ow;
  if (total == 0) return;
  dispatch_float(dtype, "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    avg_pool_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(out), make_geom(s, a), total);
  });
  GRADUS_CUDA_CHECK_LAUNCH("avg_pool2d");
}

void launch_avg_pool2d_backward(const void* grad_out, void* grad_x, DType dtype, const PoolShape& s,
                                const Pool2dArgs& a, cudaStream_t stream) {
  const int64_t total = s.planes * s.h * s.w;
  if (total == 0) return;
  dispatch_float(dtype, "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    avg_pool_backward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_out), static_cast<T*>(grad_x), make_geom(s, a), total);
  });
  GRADUS_CUDA_CHECK_LAUNCH("avg_pool2d_backward");
}

void launch_adaptive_avg_pool2d(const void* x, void* out, DType dtype, const PoolShape& s,
                                cudaStream_t stream) {
  const int64_t total = s.planes * s.oh * s.ow;
  if (total == 0) return;
  dispatch_float(dtype, "adaptive_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    adaptive_avg_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(out), s, total);
  });
  GRADUS_CUDA_CHECK_LAUNCH("adaptive_avg_pool2d");
}

void launch_adaptive_avg_pool2d_backward(const void* grad_out, void* grad_x, DType dtype,
                                         const PoolShape& s, cudaStream_t stream) {
  const int64_t total = s.planes * s.h * s.w;
  if (total == 0) return;
  dispatch_float(dtype, "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    adaptive_avg_backward_kernel<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_out), static_cast<T*>(grad_x), s, total);
  });
  GRADUS_CUDA_CHECK_LAUNCH("adaptive_avg_pool2d_backward");
}

}  // namespace gradus::backend::cuda
