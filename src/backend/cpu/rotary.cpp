// Rotary position embedding ("rotate half" layout) over [B, H, T, D] rows, forward and inverse.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/float_args.h"
#include "backend/cpu/loops.h"

namespace gradus::backend::cpu {
namespace {

template <typename T>
void rotate_rows(const Tensor& x, const T* cos, const T* sin, bool inverse, const Tensor& out) {
  const int64_t b = x.size(0), h = x.size(1), t = x.size(2), d = x.size(3), half = d / 2;
  const int64_t sb = x.stride(0), sh = x.stride(1), st = x.stride(2);
  const int64_t ob = out.stride(0), oh = out.stride(1), ot = out.stride(2);
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const T sign = inverse ? T(-1) : T(1);
  // Rows in out's memory order: (b, t, h) for the heads of a projection ([B, T, H, D] memory),
  // so that the writes are sequential.
  const bool time_major = h > 1 && ot > oh;
  parallel_for(b * h * t, std::max<int64_t>(1, kGrain / std::max<int64_t>(d, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const int64_t bi = r / (h * t);
                   const int64_t hi = time_major ? r % h : (r / t) % h;
                   const int64_t ti = time_major ? (r / h) % t : r % t;
                   const T* xr = xp + bi * sb + hi * sh + ti * st;
                   T* o = op + bi * ob + hi * oh + ti * ot;
                   const T* c = cos + ti * half;
                   const T* s = sin + ti * half;
#pragma omp simd
                   for (int64_t i = 0; i < half; ++i) {
                     const T x1 = xr[i], x2 = xr[i + half], si = sign * s[i];
                     o[i] = x1 * c[i] - x2 * si;
                     o[i + half] = x2 * c[i] + x1 * si;
                   }
                 }
               });
}

}  // namespace

void CpuBackend::rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin,
                                  bool inverse, const Tensor& out) {
  if (out.numel() == 0) return;
  F32Args f{*this, {}};
  const Tensor xf = f.in(x), cf = f.in(cos), sf = f.in(sin), of = f.out(out);
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rotate_rows<T>(xf, cf.data_ptr<T>(), sf.data_ptr<T>(), inverse, of);
  });
  f.finish();
}

}  // namespace gradus::backend::cpu
