// Softmax and log-softmax along the last axis of a contiguous [rows, cols] tensor, and their
// backwards. Rows run in parallel; each row is three vectorisable passes (max, exp-sum, scale).
// float32 uses the branch-free vec::exp so the exp pass vectorises; float64 uses <cmath>.
// Half types are computed in float32 copies.
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/float_args.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/vec_math.h"

namespace gradus::backend::cpu {
namespace {

inline float exp_(float v) {
  return vec::exp(v);
}
inline double exp_(double v) {
  return std::exp(v);
}

int64_t last_dim(const Tensor& t) {
  return t.dim() == 0 ? 1 : t.size(t.dim() - 1);
}

template <typename T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols, bool log) {
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const T* xr = x + r * cols;
                   T* yr = y + r * cols;
                   T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
                   for (int64_t c = 0; c < cols; ++c) mx = xr[c] > mx ? xr[c] : mx;
                   // All -inf: PyTorch's shift is then 0 (yielding NaN from -inf - -inf anyway).
                   T sum = 0;
                   if (log) {
#pragma omp simd reduction(+ : sum)
                     for (int64_t c = 0; c < cols; ++c) sum += exp_(xr[c] - mx);
                     // (x - max) - log(sum), not x - (max + log(sum)): the latter rounds the
                     // shift at max's magnitude (ulp 8e-6 at 85 in f32).
                     const T log_sum = static_cast<T>(std::log(sum));
#pragma omp simd
                     for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mx) - log_sum;
                   } else {
#pragma omp simd reduction(+ : sum)
                     for (int64_t c = 0; c < cols; ++c) {
                       const T e = exp_(xr[c] - mx);
                       yr[c] = e;
                       sum += e;
                     }
                     const T inv = T(1) / sum;
#pragma omp simd
                     for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
                   }
                 }
               });
}

template <typename T>
void softmax_backward_rows(const T* g, const T* y, T* gx, int64_t rows, int64_t cols, bool log) {
  parallel_for(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   const T* gr = g + r * cols;
                   const T* yr = y + r * cols;
                   T* out = gx + r * cols;
                   T s = 0;
                   if (log) {  // gx = g - exp(y) * sum(g)
#pragma omp simd reduction(+ : s)
                     for (int64_t c = 0; c < cols; ++c) s += gr[c];
#pragma omp simd
                     for (int64_t c = 0; c < cols; ++c) out[c] = gr[c] - exp_(yr[c]) * s;
                   } else {  // gx = y * (g - sum(g * y))
#pragma omp simd reduction(+ : s)
                     for (int64_t c = 0; c < cols; ++c) s += gr[c] * yr[c];
#pragma omp simd
                     for (int64_t c = 0; c < cols; ++c) out[c] = yr[c] * (gr[c] - s);
                   }
                 }
               });
}

}  // namespace

void CpuBackend::softmax(const Tensor& x, const Tensor& out, bool log) {
  if (x.numel() == 0) return;
  F32Args a{*this, {}};
  const Tensor xf = a.in(x), of = a.out(out);
  const int64_t cols = last_dim(x), rows = x.numel() / cols;
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    softmax_rows(xf.data_ptr<T>(), of.data_ptr<T>(), rows, cols, log);
  });
  a.finish();
}

void CpuBackend::softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in,
                                  bool log) {
  if (y.numel() == 0) return;
  F32Args a{*this, {}};
  const Tensor gf = a.in(grad_out), yf = a.in(y), of = a.out(grad_in);
  const int64_t cols = last_dim(y), rows = y.numel() / cols;
  dispatch_f(yf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_rows(gf.data_ptr<T>(), yf.data_ptr<T>(), of.data_ptr<T>(), rows, cols, log);
  });
  a.finish();
}

}  // namespace gradus::backend::cpu
