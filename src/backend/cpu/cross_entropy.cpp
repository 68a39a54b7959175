// Fused cross-entropy over logits [N, C] with integer targets, optional class weights, label
// smoothing and ignore_index, and its backward. Per row (PyTorch's formula, reduction 'none'):
//   logp_c = x_c - lse,  lse = log sum_c exp(x_c)
//   loss   = -(1 - ls) * w_t * logp_t - ls / C * sum_c w_c * logp_c
//   dloss/dx_c = p_c * ((1 - ls) * w_t + ls / C * sum_c w_c) - (1 - ls) * w_t * [c == t]
//                - ls / C * w_c                                     (w = 1 without weights)
// Ignored rows get loss 0 and gradient 0 (lse is still written). Targets outside [0, C) that are
// not ignore_index are rejected by the op layer; here they give NaN rather than a crash.
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

// Reads element i of a 1-D integer tensor of any integer dtype and stride.
int64_t target_at(const Tensor& t, int64_t i) {
  const int64_t s = t.dim() == 0 ? 0 : t.stride(0);
  switch (t.dtype()) {
    case DType::i32:
      return t.data_ptr<int32_t>()[i * s];
    case DType::u8:
      return t.data_ptr<uint8_t>()[i * s];
    default:
      return t.data_ptr<int64_t>()[i * s];
  }
}

template <typename T>
struct CeArgs {
  const T* x;
  const T* w;  // [C] or null
  int64_t N, C;
  int64_t ignore_index;
  T ls;
  T wsum;  // sum of the class weights (C without weights)
};

template <typename T>
T row_lse(const T* xr, int64_t C) {
  T mx = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t c = 0; c < C; ++c) mx = xr[c] > mx ? xr[c] : mx;
  if (std::isinf(mx)) return mx;  // all -inf (lse -inf) or a +inf logit (lse +inf)
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < C; ++c) sum += exp_(xr[c] - mx);
  return mx + static_cast<T>(std::log(sum));
}

template <typename T>
void ce_forward(const CeArgs<T>& a, const Tensor& target, T* loss, T* lse) {
  parallel_for(a.N, std::max<int64_t>(1, kGrain / std::max<int64_t>(a.C, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t i = r0; i < r1; ++i) {
                   const T* xr = a.x + i * a.C;
                   const T l = row_lse(xr, a.C);
                   lse[i] = l;
                   const int64_t t = target_at(target, i);
                   if (t == a.ignore_index) {
                     loss[i] = 0;
                     continue;
                   }
                   if (t < 0 || t >= a.C) {
                     loss[i] = std::numeric_limits<T>::quiet_NaN();
                     continue;
                   }
                   const T wt = a.w ? a.w[t] : T(1);
                   T v = -(T(1) - a.ls) * wt * (xr[t] - l);
                   if (a.ls != T(0)) {
                     T s = 0;  // sum_c w_c * logp_c
                     if (a.w) {
#pragma omp simd reduction(+ : s)
                       for (int64_t c = 0; c < a.C; ++c) s += a.w[c] * (xr[c] - l);
                     } else {
#pragma omp simd reduction(+ : s)
                       for (int64_t c = 0; c < a.C; ++c) s += xr[c] - l;
                     }
                     v -= a.ls / static_cast<T>(a.C) * s;
                   }
                   loss[i] = v;
                 }
               });
}

template <typename T>
void ce_backward(const CeArgs<T>& a, const Tensor& target, const Tensor& grad_loss, const T* lse,
                 T* gx) {
  const T* g = grad_loss.data_ptr<T>();
  const int64_t gs = grad_loss.dim() == 0 ? 0 : grad_loss.stride(0);
  parallel_for(a.N, std::max<int64_t>(1, kGrain / std::max<int64_t>(a.C, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t i = r0; i < r1; ++i) {
                   const T* xr = a.x + i * a.C;
                   T* out = gx + i * a.C;
                   const int64_t t = target_at(target, i);
                   if (t == a.ignore_index) {
#pragma omp simd
                     for (int64_t c = 0; c < a.C; ++c) out[c] = 0;
                     continue;
                   }
                   if (t < 0 || t >= a.C) {
#pragma omp simd
                     for (int64_t c = 0; c < a.C; ++c) out[c] = std::numeric_limits<T>::quiet_NaN();
                     continue;
                   }
                   const T gi = g[i * gs];
                   const T l = lse[i];
                   const T wt = (a.w ? a.w[t] : T(1)) * (T(1) - a.ls);
                   const T smooth = a.ls / static_cast<T>(a.C);
                   const T pscale = gi * (wt + smooth * a.wsum);
                   if (a.w && smooth != T(0)) {
                     const T gs_ = gi * smooth;
#pragma omp simd
                     for (int64_t c = 0; c < a.C; ++c)
                       out[c] = pscale * exp_(xr[c] - l) - gs_ * a.w[c];
                   } else {
                     const T off = gi * smooth;
#pragma omp simd
                     for (int64_t c = 0; c < a.C; ++c) out[c] = pscale * exp_(xr[c] - l) - off;
                   }
                   out[t] -= gi * wt;
                 }
               });
}

template <typename T>
CeArgs<T> make_args(const Tensor& logits, const Tensor& weight, int64_t ignore_index,
                    double label_smoothing) {
  CeArgs<T> a{logits.data_ptr<T>(),
              weight.defined() ? weight.data_ptr<T>() : nullptr,
              logits.size(0),
              logits.dim() > 1 ? logits.size(1) : 1,
              ignore_index,
              static_cast<T>(label_smoothing),
              T(0)};
  if (a.w) {
    double s = 0;
    for (int64_t c = 0; c < a.C; ++c) s += static_cast<double>(a.w[c]);
    a.wsum = static_cast<T>(s);
  } else {
    a.wsum = static_cast<T>(a.C);
  }
  return a;
}

}  // namespace

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                               int64_t ignore_index, double label_smoothing, const Tensor& loss,
                               const Tensor& lse) {
  if (logits.numel() == 0) return;
  F32Args f{*this, {}};
  const Tensor xf = f.in(logits), wf = f.in(weight), lf = f.out(loss), sf = f.out(lse);
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const CeArgs<T> a = make_args<T>(xf, wf, ignore_index, label_smoothing);
    ce_forward(a, target, lf.data_ptr<T>(), sf.data_ptr<T>());
  });
  f.finish();
}

void CpuBackend::cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits,
                                        const Tensor& target, const Tensor& weight,
                                        int64_t ignore_index, double label_smoothing,
                                        const Tensor& lse, const Tensor& grad_logits) {
  if (logits.numel() == 0) return;
  F32Args f{*this, {}};
  const Tensor gf = f.in(grad_loss), xf = f.in(logits), wf = f.in(weight), sf = f.in(lse);
  const Tensor of = f.out(grad_logits);
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const CeArgs<T> a = make_args<T>(xf, wf, ignore_index, label_smoothing);
    ce_backward(a, target, gf, sf.data_ptr<T>(), of.data_ptr<T>());
  });
  f.finish();
}

}  // namespace gradus::backend::cpu
