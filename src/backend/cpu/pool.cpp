// 2-D max / average / adaptive-average pooling over contiguous [N, C, H, W] tensors and their
// backwards, with PyTorch's window rules (the op layer computes the output size, including
// ceil_mode). Planes (n, c) run in parallel; backwards scatter into their own plane only.
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/float_args.h"
#include "backend/cpu/loops.h"

namespace gradus::backend::cpu {
namespace {

struct Planes {
  int64_t planes, H, W, OH, OW;
};

// in [.., H, W] and out [.., OH, OW] (rank 3 or 4: the last two dims are spatial).
Planes planes_of(const Tensor& in, const Tensor& out) {
  const int64_t d = in.dim();
  const int64_t H = in.size(d - 2), W = in.size(d - 1);
  const int64_t OH = out.size(d - 2), OW = out.size(d - 1);
  return {H * W > 0 ? in.numel() / (H * W) : 0, H, W, OH, OW};
}

int64_t plane_grain(const Planes& p) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, p.H * p.W + p.OH * p.OW));
}

// ----------------------------------------------------------------------------------- max pool
template <typename T>
void max_pool_fwd(const T* x, T* y, int64_t* idx, const Planes& p, const Pool2dArgs& a) {
  const bool fast2x2 = a.kernel_h == 2 && a.kernel_w == 2 && a.stride_h == 2 && a.stride_w == 2 &&
                       a.pad_h == 0 && a.pad_w == 0 && a.dilation_h == 1 && a.dilation_w == 1 &&
                       2 * p.OH <= p.H && 2 * p.OW <= p.W;
  parallel_for(p.planes, plane_grain(p), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = x + pl * p.H * p.W;
      T* yp = y + pl * p.OH * p.OW;
      int64_t* ip = idx + pl * p.OH * p.OW;
      if (fast2x2) {  // the common case: every window is whole and inside the plane
        for (int64_t oh = 0; oh < p.OH; ++oh) {
          const T* r0 = xp + 2 * oh * p.W;
          const T* r1 = r0 + p.W;
          for (int64_t ow = 0; ow < p.OW; ++ow) {
            // Same scan order and tie/NaN rule as the general path (starting from the first
            // value gives the same result as starting from -inf with its index).
            const int64_t base = 2 * oh * p.W + 2 * ow;
            T best = r0[2 * ow];
            int64_t bi = base;
            if (r0[2 * ow + 1] > best || std::isnan(r0[2 * ow + 1]))
              best = r0[2 * ow + 1], bi = base + 1;
            if (r1[2 * ow] > best || std::isnan(r1[2 * ow])) best = r1[2 * ow], bi = base + p.W;
            if (r1[2 * ow + 1] > best || std::isnan(r1[2 * ow + 1]))
              best = r1[2 * ow + 1], bi = base + p.W + 1;
            yp[oh * p.OW + ow] = best;
            ip[oh * p.OW + ow] = bi;
          }
        }
        continue;
      }
      for (int64_t oh = 0; oh < p.OH; ++oh) {
        int64_t h0 = oh * a.stride_h - a.pad_h;
        const int64_t h1 = std::min(h0 + (a.kernel_h - 1) * a.dilation_h + 1, p.H);
        while (h0 < 0) h0 += a.dilation_h;
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          int64_t w0 = ow * a.stride_w - a.pad_w;
          const int64_t w1 = std::min(w0 + (a.kernel_w - 1) * a.dilation_w + 1, p.W);
          while (w0 < 0) w0 += a.dilation_w;
          // PyTorch: start at -inf with the index of the window's first in-range element; a
          // value replaces the max when greater, or when it is NaN.
          T best = -std::numeric_limits<T>::infinity();
          int64_t bi = h0 * p.W + w0;
          for (int64_t h = h0; h < h1; h += a.dilation_h) {
            for (int64_t w = w0; w < w1; w += a.dilation_w) {
              const T v = xp[h * p.W + w];
              if (v > best || std::isnan(v)) {
                best = v;
                bi = h * p.W + w;
              }
            }
          }
          yp[oh * p.OW + ow] = best;
          ip[oh * p.OW + ow] = bi;
        }
      }
    }
  });
}

template <typename T>
void max_pool_bwd(const T* gy, const int64_t* idx, T* gx, const Planes& p) {
  parallel_for(p.planes, plane_grain(p), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      T* gxp = gx + pl * p.H * p.W;
      const T* gyp = gy + pl * p.OH * p.OW;
      const int64_t* ip = idx + pl * p.OH * p.OW;
      std::fill(gxp, gxp + p.H * p.W, T(0));
      for (int64_t i = 0; i < p.OH * p.OW; ++i) {
        const int64_t j = ip[i];
        if (j >= 0 && j < p.H * p.W) gxp[j] += gyp[i];  // out-of-plane indices are skipped
      }
    }
  });
}

// ----------------------------------------------------------------------------------- avg pool
// One window of PyTorch's avg_pool2d: the clipped range and the divisor.
struct AvgWindow {
  int64_t h0, h1, w0, w1;
  double divisor;
  bool empty() const { return h0 >= h1 || w0 >= w1; }
};

AvgWindow avg_window(int64_t oh, int64_t ow, const Planes& p, const Pool2dArgs& a) {
  int64_t h0 = oh * a.stride_h - a.pad_h, w0 = ow * a.stride_w - a.pad_w;
  int64_t h1 = std::min(h0 + a.kernel_h, p.H + a.pad_h);
  int64_t w1 = std::min(w0 + a.kernel_w, p.W + a.pad_w);
  const int64_t pool_size = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, p.H);
  w1 = std::min(w1, p.W);
  double div;
  if (a.divisor_override != 0)
    div = static_cast<double>(a.divisor_override);
  else if (a.count_include_pad)
    div = static_cast<double>(pool_size);
  else
    div = static_cast<double>((h1 - h0) * (w1 - w0));
  return {h0, h1, w0, w1, div};
}

template <typename T>
void avg_pool_fwd(const T* x, T* y, const Planes& p, const Pool2dArgs& a) {
  parallel_for(p.planes, plane_grain(p), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = x + pl * p.H * p.W;
      T* yp = y + pl * p.OH * p.OW;
      for (int64_t oh = 0; oh < p.OH; ++oh) {
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          const AvgWindow win = avg_window(oh, ow, p, a);
          if (win.empty()) {
            yp[oh * p.OW + ow] = 0;
            continue;
          }
          T s = 0;
          for (int64_t h = win.h0; h < win.h1; ++h)
            for (int64_t w = win.w0; w < win.w1; ++w) s += xp[h * p.W + w];
          yp[oh * p.OW + ow] = static_cast<T>(s / static_cast<T>(win.divisor));
        }
      }
    }
  });
}

template <typename T>
void avg_pool_bwd(const T* gy, T* gx, const Planes& p, const Pool2dArgs& a) {
  parallel_for(p.planes, plane_grain(p), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      T* gxp = gx + pl * p.H * p.W;
      const T* gyp = gy + pl * p.OH * p.OW;
      std::fill(gxp, gxp + p.H * p.W, T(0));
      for (int64_t oh = 0; oh < p.OH; ++oh) {
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          const AvgWindow win = avg_window(oh, ow, p, a);
          if (win.empty()) continue;
          const T g = static_cast<T>(gyp[oh * p.OW + ow] / static_cast<T>(win.divisor));
          for (int64_t h = win.h0; h < win.h1; ++h)
            for (int64_t w = win.w0; w < win.w1; ++w) gxp[h * p.W + w] += g;
        }
      }
    }
  });
}

// ---------------------------------------------------------------------------- adaptive avg pool
// PyTorch's bins: [floor(i * in / out), ceil((i + 1) * in / out)).
inline int64_t bin_start(int64_t i, int64_t out, int64_t in) {
  return (i * in) / out;
}
inline int64_t bin_end(int64_t i, int64_t out, int64_t in) {
  return ((i + 1) * in + out - 1) / out;
}

template <typename T>
void adaptive_avg_fwd(const T* x, T* y, const Planes& p) {
  parallel_for(p.planes, plane_grain(p), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = x + pl * p.H * p.W;
      T* yp = y + pl * p.OH * p.OW;
      for (int64_t oh = 0; oh < p.OH; ++oh) {
        const int64_t h0 = bin_start(oh, p.OH, p.H), h1 = bin_end(oh, p.OH, p.H);
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          const int64_t w0 = bin_start(ow, p.OW, p.W), w1 = bin_end(ow, p.OW, p.W);
          T s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += xp[h * p.W + w];
          yp[oh * p.OW + ow] = s / static_cast<T>((h1 - h0) * (w1 - w0));
        }
      }
    }
  });
}

template <typename T>
void adaptive_avg_bwd(const T* gy, T* gx, const Planes& p) {
  parallel_for(p.planes, plane_grain(p), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      T* gxp = gx + pl * p.H * p.W;
      const T* gyp = gy + pl * p.OH * p.OW;
      std::fill(gxp, gxp + p.H * p.W, T(0));
      for (int64_t oh = 0; oh < p.OH; ++oh) {
        const int64_t h0 = bin_start(oh, p.OH, p.H), h1 = bin_end(oh, p.OH, p.H);
        for (int64_t ow = 0; ow < p.OW; ++ow) {
          const int64_t w0 = bin_start(ow, p.OW, p.W), w1 = bin_end(ow, p.OW, p.W);
          const T g = gyp[oh * p.OW + ow] / static_cast<T>((h1 - h0) * (w1 - w0));
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) gxp[h * p.W + w] += g;
        }
      }
    }
  });
}

}  // namespace

void CpuBackend::max_pool2d(const Tensor& x, const Tensor& out, const Tensor& indices,
                            const Pool2dArgs& args) {
  if (out.numel() == 0) return;
  const Planes p = planes_of(x, out);
  F32Args f{*this, {}};
  const Tensor xf = f.in(x), of = f.out(out);
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    max_pool_fwd(xf.data_ptr<T>(), of.data_ptr<T>(), indices.data_ptr<int64_t>(), p, args);
  });
  f.finish();
}

void CpuBackend::max_pool2d_backward(const Tensor& grad_out, const Tensor& indices,
                                     const Tensor& grad_x) {
  if (grad_x.numel() == 0) return;
  const Planes p = planes_of(grad_x, grad_out);
  F32Args f{*this, {}};
  const Tensor gf = f.in(grad_out), of = f.out(grad_x);
  dispatch_f(of.dtype(), [&](auto tag) {
    using T = decltype(tag);
    max_pool_bwd(gf.data_ptr<T>(), indices.data_ptr<int64_t>(), of.data_ptr<T>(), p);
  });
  f.finish();
}

void CpuBackend::avg_pool2d(const Tensor& x, const Tensor& out, const Pool2dArgs& args) {
  if (out.numel() == 0) return;
  const Planes p = planes_of(x, out);
  F32Args f{*this, {}};
  const Tensor xf = f.in(x), of = f.out(out);
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    avg_pool_fwd(xf.data_ptr<T>(), of.data_ptr<T>(), p, args);
  });
  f.finish();
}

void CpuBackend::avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x,
                                     const Pool2dArgs& args) {
  if (grad_x.numel() == 0) return;
  const Planes p = planes_of(grad_x, grad_out);
  F32Args f{*this, {}};
  const Tensor gf = f.in(grad_out), of = f.out(grad_x);
  dispatch_f(of.dtype(), [&](auto tag) {
    using T = decltype(tag);
    avg_pool_bwd(gf.data_ptr<T>(), of.data_ptr<T>(), p, args);
  });
  f.finish();
}

void CpuBackend::adaptive_avg_pool2d(const Tensor& x, const Tensor& out) {
  if (out.numel() == 0) return;
  const Planes p = planes_of(x, out);
  F32Args f{*this, {}};
  const Tensor xf = f.in(x), of = f.out(out);
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    adaptive_avg_fwd(xf.data_ptr<T>(), of.data_ptr<T>(), p);
  });
  f.finish();
}

void CpuBackend::adaptive_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x) {
  if (grad_x.numel() == 0) return;
  const Planes p = planes_of(grad_x, grad_out);
  F32Args f{*this, {}};
  const Tensor gf = f.in(grad_out), of = f.out(grad_x);
  dispatch_f(of.dtype(), [&](auto tag) {
    using T = decltype(tag);
    adaptive_avg_bwd(gf.data_ptr<T>(), of.data_ptr<T>(), p);
  });
  f.finish();
}

}  // namespace gradus::backend::cpu
