// Fused scaled dot-product attention on CUDA, the same math as the CPU kernel
// (src/backend/cpu/attention.cpp): online softmax forward saving each row's log-sum-exp, and a
// backward that recomputes the probabilities. The scores are never stored.
//
// This first version gives each query row (forward, dQ) or key row (dK, dV) one warp, whose 32
// lanes hold the row's head dimension (<= kMaxHead) in registers and walk the other sequence one
// element at a time: simple, deterministic (no atomics), O(T) memory, but not yet a tiled
// FlashAttention kernel using tensor cores; see docs/performance.md for its status on a GPU.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "gradus/core/random.h"

namespace gradus::backend::cuda {
namespace {

constexpr int kPer = kMaxAttentionHead / 32;  // head elements per lane
constexpr int kWarps = 4;                     // rows per block

struct Geometry {
  int64_t batch, tq, tk, d, dv;
  float scale_f;
  double scale;
  bool causal;
  double dropout_p;
  PhiloxState rng;
};

// Dropout multiplier of probability (b, i, j): 0 or 1 / (1 - p), the CPU's stream element.
template <typename C>
__device__ __forceinline__ C dropout_mult(const Geometry& g, int64_t b, int64_t i, int64_t j) {
  if (g.dropout_p <= 0) return C(1);
  const uint64_t e = static_cast<uint64_t>((b * g.tq + i) * g.tk + j);
  const uint32_t w = philox4x32(g.rng.offset + e / 4, g.rng.seed)[e % 4];
  return uint_to_unit_float(w) >= static_cast<float>(g.dropout_p)
             ? static_cast<C>(1.0 / (1.0 - g.dropout_p))
             : C(0);
}

template <typename T, typename C>
__device__ __forceinline__ void load_row(const T* p, int64_t n, C (&r)[kPer]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const int64_t c = lane + 32 * t;
    r[t] = c < n ? load(p + c) : C(0);
  }
}

template <typename T, typename C>
__device__ __forceinline__ C dot_row(const C (&r)[kPer], const T* p, int64_t n) {
  const int lane = threadIdx.x & 31;
  C s = 0;
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const int64_t c = lane + 32 * t;
    if (c < n) s += r[t] * load(p + c);
  }
  return warp_sum(s);
}

__device__ __forceinline__ int64_t warp_row() {
  return static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    attention_forward_kernel(Geometry g, const T* q, const T* k, const T* v, T* out,
                             compute_t<T>* lse) {
  using C = compute_t<T>;
  const int64_t row = warp_row();
  if (row >= g.batch * g.tq) return;
  const int64_t b = row / g.tq, i = row % g.tq;
  C qr[kPer], acc[kPer];
  load_row(q + row * g.d, g.d, qr);
#pragma unroll
  for (int t = 0; t < kPer; ++t) acc[t] = 0;
  C m = -INFINITY, l = 0;
  const int64_t kend = g.causal ? min(g.tk, i + 1) : g.tk;
  const C scale = static_cast<C>(g.scale);
  for (int64_t j = 0; j < kend; ++j) {
    const C s = scale * dot_row(qr, k + (b * g.tk + j) * g.d, g.d);
    const C mn = s > m ? s : m;
    const C rescale = m_exp(m - mn), p = m_exp(s - mn);
    l = l * rescale + p;
    m = mn;
    const C pd = p * dropout_mult<C>(g, b, i, j);
    const T* vr = v + (b * g.tk + j) * g.dv;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int t = 0; t < kPer; ++t) {
      const int64_t c = lane + 32 * t;
      acc[t] = acc[t] * rescale + (c < g.dv ? pd * load(vr + c) : C(0));
    }
  }
  const C inv = l > 0 ? C(1) / l : C(0);
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const int64_t c = lane + 32 * t;
    if (c < g.dv) out[row * g.dv + c] = convert<T>(acc[t] * inv);
  }
  if (lane == 0) lse[row] = l > 0 ? m + m_log(l) : m;
}

// delta[row] = sum_c dO[row, c] * O[row, c]
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    attention_delta_kernel(Geometry g, const T* go, const T* o, compute_t<T>* delta) {
  using C = compute_t<T>;
  const int64_t row = warp_row();
  if (row >= g.batch * g.tq) return;
  C r[kPer];
  load_row(go + row * g.dv, g.dv, r);
  const C s = dot_row(r, o + row * g.dv, g.dv);
  if ((threadIdx.x & 31) == 0) delta[row] = s;
}

// dQ_i = scale sum_j P_ij (z_ij dPd_ij - D_i) k_j, one warp per query row.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dq_kernel(Geometry g, const T* go, const T* q, const T* k, const T* v,
                        const compute_t<T>* lse, const compute_t<T>* delta, T* gq) {
  using C = compute_t<T>;
  const int64_t row = warp_row();
  if (row >= g.batch * g.tq) return;
  const int64_t b = row / g.tq, i = row % g.tq;
  C qr[kPer], dor[kPer], acc[kPer];
  load_row(q + row * g.d, g.d, qr);
  load_row(go + row * g.dv, g.dv, dor);
#pragma unroll
  for (int t = 0; t < kPer; ++t) acc[t] = 0;
  const C scale = static_cast<C>(g.scale), row_lse = lse[row], dl = delta[row];
  const int64_t kend = g.causal ? min(g.tk, i + 1) : g.tk;
  const int lane = threadIdx.x & 31;
  for (int64_t j = 0; j < kend; ++j) {
    const T* kr = k + (b * g.tk + j) * g.d;
    const C p = m_exp(scale * dot_row(qr, kr, g.d) - row_lse);
    const C dp = dot_row(dor, v + (b * g.tk + j) * g.dv, g.dv) * dropout_mult<C>(g, b, i, j);
    const C ds = p * (dp - dl);
#pragma unroll
    for (int t = 0; t < kPer; ++t) {
      const int64_t c = lane + 32 * t;
      if (c < g.d) acc[t] += ds * load(kr + c);
    }
  }
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const int64_t c = lane + 32 * t;
    if (c < g.d) gq[row * g.d + c] = convert<T>(scale * acc[t]);
  }
}

// dK_j = scale sum_i dS_ij q_i and dV_j = sum_i z_ij P_ij dO_i, one warp per key row.
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dkv_kernel(Geometry g, const T* go, const T* q, const T* k, const T* v,
                         const compute_t<T>* lse, const compute_t<T>* delta, T* gk, T* gv) {
  using C = compute_t<T>;
  const int64_t row = warp_row();
  if (row >= g.batch * g.tk) return;
  const int64_t b = row / g.tk, j = row % g.tk;
  C kr[kPer], vr[kPer], dk[kPer], dv[kPer];
  load_row(k + row * g.d, g.d, kr);
  load_row(v + row * g.dv, g.dv, vr);
#pragma unroll
  for (int t = 0; t < kPer; ++t) dk[t] = dv[t] = 0;
  const C scale = static_cast<C>(g.scale);
  const int lane = threadIdx.x & 31;
  for (int64_t i = g.causal ? j : 0; i < g.tq; ++i) {
    const int64_t qrow = b * g.tq + i;
    const T* qi = q + qrow * g.d;
    const T* goi = go + qrow * g.dv;
    const C p = m_exp(scale * dot_row(kr, qi, g.d) - lse[qrow]);
    const C z = dropout_mult<C>(g, b, i, j);
    const C ds = p * (dot_row(vr, goi, g.dv) * z - delta[qrow]);
#pragma unroll
    for (int t = 0; t < kPer; ++t) {
      const int64_t c = lane + 32 * t;
      if (c < g.d) dk[t] += ds * load(qi + c);
      if (c < g.dv) dv[t] += z * p * load(goi + c);
    }
  }
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const int64_t c = lane + 32 * t;
    if (c < g.d) gk[row * g.d + c] = convert<T>(scale * dk[t]);
    if (c < g.dv) gv[row * g.dv + c] = convert<T>(dv[t]);
  }
}

// ---------------------------------------------------------------- the materialised path
// attention.cpp computes the scaled scores s = scale q k^T with cuBLASLt into a [batch * tq, tk]
// buffer of the compute type C; these kernels turn each row (one warp) into probabilities and
// back, with the streaming kernels' formulas (the same dropout elements, the same lse).

// Forward: row r of s becomes the dropped-out probabilities, 0 past the causal limit, and lse[r]
// its log-sum-exp.
template <typename C>
__global__ void __launch_bounds__(kWarps * 32) attention_softmax_kernel(Geometry g, C* s, C* lse) {
  const int64_t row = warp_row();
  if (row >= g.batch * g.tq) return;
  const int64_t b = row / g.tq, i = row % g.tq;
  const int lane = threadIdx.x & 31;
  C* sr = s + row * g.tk;
  const int64_t kend = g.causal ? min(g.tk, i + 1) : g.tk;
  C m = -INFINITY;
  for (int64_t j = lane; j < kend; j += 32) m = sr[j] > m ? sr[j] : m;
  m = warp_reduce(m, [](C a, C c) { return a > c ? a : c; });
  C l = 0;
  for (int64_t j = lane; j < kend; j += 32) l += m_exp(sr[j] - m);
  l = warp_sum(l);
  const C inv = l > 0 ? C(1) / l : C(0);
  for (int64_t j = lane; j < g.tk; j += 32) {
    sr[j] = j < kend ? m_exp(sr[j] - m) * inv * dropout_mult<C>(g, b, i, j) : C(0);
  }
  if (lane == 0) lse[row] = l > 0 ? m + m_log(l) : m;
}

// Backward: row r of s becomes P = exp(s - lse[r]) (0 past the causal limit) and, where there is
// dropout, row r of pd the dropped-out P * mask (what multiplied v).
template <typename C>
__global__ void __launch_bounds__(kWarps * 32)
    attention_recompute_kernel(Geometry g, C* s, C* pd, const C* lse) {
  const int64_t row = warp_row();
  if (row >= g.batch * g.tq) return;
  const int64_t b = row / g.tq, i = row % g.tq;
  const int lane = threadIdx.x & 31;
  C* sr = s + row * g.tk;
  const int64_t kend = g.causal ? min(g.tk, i + 1) : g.tk;
  const C row_lse = lse[row];
  for (int64_t j = lane; j < g.tk; j += 32) {
    const C p = j < kend ? m_exp(sr[j] - row_lse) : C(0);
    sr[j] = p;
    if (pd != nullptr) pd[row * g.tk + j] = p * dropout_mult<C>(g, b, i, j);
  }
}

// Backward: dS = P * (dP * mask - delta[r]) in place of P, for dp = dO v^T.
template <typename C>
__global__ void __launch_bounds__(kWarps * 32)
    attention_score_grad_kernel(Geometry g, C* p, const C* dp, const C* delta) {
  const int64_t row = warp_row();
  if (row >= g.batch * g.tq) return;
  const int64_t b = row / g.tq, i = row % g.tq;
  const int lane = threadIdx.x & 31;
  C* pr = p + row * g.tk;
  const C* dpr = dp + row * g.tk;
  const int64_t kend = g.causal ? min(g.tk, i + 1) : g.tk;
  const C dl = delta[row];
  for (int64_t j = lane; j < g.tk; j += 32) {
    pr[j] = j < kend ? pr[j] * (dpr[j] * dropout_mult<C>(g, b, i, j) - dl) : C(0);
  }
}

// delta[r] = dO[r] . O[r] over any head size (the streaming kernels' version holds the row in
// registers, kMaxAttentionHead at most).
template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    attention_row_dot_kernel(Geometry g, const T* go, const T* o, compute_t<T>* delta) {
  using C = compute_t<T>;
  const int64_t row = warp_row();
  if (row >= g.batch * g.tq) return;
  C acc = 0;
  for (int64_t c = threadIdx.x & 31; c < g.dv; c += 32) {
    acc += load(go + row * g.dv + c) * load(o + row * g.dv + c);
  }
  acc = warp_sum(acc);
  if ((threadIdx.x & 31) == 0) delta[row] = acc;
}

template <typename Fn>
void dispatch_compute(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    default:
      throw DTypeError(std::string(op) + ": the scores are float32 or float64");
  }
}

Geometry geometry(const AttentionShape& s, const AttentionArgs& a) {
  return {s.batch, s.tq,     s.tk,        s.d,  s.dv, static_cast<float>(a.scale),
          a.scale, a.causal, a.dropout_p, a.rng};
}

}  // namespace

void launch_attention(const AttentionShape& s, const AttentionArgs& a, const void* q, const void* k,
                      const void* v, void* out, void* lse, DType dtype, cudaStream_t stream) {
  const Geometry g = geometry(s, a);
  if (s.batch * s.tq == 0) return;
  dispatch_float(dtype, "attention", [&](auto tag) {
    using T = decltype(tag);
    attention_forward_kernel<T><<<blocks_for(s.batch * s.tq, kWarps), kWarps * 32, 0, stream>>>(
        g, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
        static_cast<T*>(out), static_cast<compute_t<T>*>(lse));
  });
  GRADUS_CUDA_CHECK_LAUNCH("attention");
}

void launch_attention_backward(const AttentionShape& s, const AttentionArgs& a,
                               const void* grad_out, const void* q, const void* k, const void* v,
                               const void* out, const void* lse, void* delta, void* grad_q,
                               void* grad_k, void* grad_v, DType dtype, cudaStream_t stream) {
  const Geometry g = geometry(s, a);
  dispatch_float(dtype, "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* go = static_cast<const T*>(grad_out);
    const unsigned qb = blocks_for(s.batch * s.tq, kWarps), kb = blocks_for(s.batch * s.tk, kWarps);
    if (s.batch * s.tq > 0) {
      attention_delta_kernel<T><<<qb, kWarps * 32, 0, stream>>>(g, go, static_cast<const T*>(out),
                                                                static_cast<C*>(delta));
      attention_dq_kernel<T><<<qb, kWarps * 32, 0, stream>>>(
          g, go, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
          static_cast<const C*>(lse), static_cast<const C*>(delta), static_cast<T*>(grad_q));
    }
    if (s.batch * s.tk > 0) {
      attention_dkv_kernel<T><<<kb, kWarps * 32, 0, stream>>>(
          g, go, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
          static_cast<const C*>(lse), static_cast<const C*>(delta), static_cast<T*>(grad_k),
          static_cast<T*>(grad_v));
    }
  });
  GRADUS_CUDA_CHECK_LAUNCH("attention_backward");
}

void launch_attention_softmax(const AttentionShape& s, const AttentionArgs& a, void* scores,
                              void* lse, DType compute, cudaStream_t stream) {
  if (s.batch * s.tq == 0) return;
  const Geometry g = geometry(s, a);
  dispatch_compute(compute, "attention", [&](auto tag) {
    using C = decltype(tag);
    attention_softmax_kernel<C><<<blocks_for(s.batch * s.tq, kWarps), kWarps * 32, 0, stream>>>(
        g, static_cast<C*>(scores), static_cast<C*>(lse));
  });
  GRADUS_CUDA_CHECK_LAUNCH("attention (softmax)");
}

void launch_attention_recompute(const AttentionShape& s, const AttentionArgs& a, void* scores,
                                void* dropped, const void* lse, DType compute,
                                cudaStream_t stream) {
  if (s.batch * s.tq == 0) return;
  const Geometry g = geometry(s, a);
  dispatch_compute(compute, "attention_backward", [&](auto tag) {
    using C = decltype(tag);
    attention_recompute_kernel<C><<<blocks_for(s.batch * s.tq, kWarps), kWarps * 32, 0, stream>>>(
        g, static_cast<C*>(scores), static_cast<C*>(dropped), static_cast<const C*>(lse));
  });
  GRADUS_CUDA_CHECK_LAUNCH("attention_backward (probabilities)");
}

void launch_attention_score_grad(const AttentionShape& s, const AttentionArgs& a, void* probs,
                                 const void* dp, const void* delta, DType compute,
                                 cudaStream_t stream) {
  if (s.batch * s.tq == 0) return;
  const Geometry g = geometry(s, a);
  dispatch_compute(compute, "attention_backward", [&](auto tag) {
    using C = decltype(tag);
    attention_score_grad_kernel<C><<<blocks_for(s.batch * s.tq, kWarps), kWarps * 32, 0, stream>>>(
        g, static_cast<C*>(probs), static_cast<const C*>(dp), static_cast<const C*>(delta));
  });
  GRADUS_CUDA_CHECK_LAUNCH("attention_backward (score gradient)");
}

void launch_attention_delta(const AttentionShape& s, const void* grad_out, const void* out,
                            void* delta, DType dtype, cudaStream_t stream) {
  if (s.batch * s.tq == 0) return;
  const Geometry g = geometry(s, AttentionArgs{});
  dispatch_float(dtype, "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    attention_row_dot_kernel<T><<<blocks_for(s.batch * s.tq, kWarps), kWarps * 32, 0, stream>>>(
        g, static_cast<const T*>(grad_out), static_cast<const T*>(out),
        static_cast<compute_t<T>*>(delta));
  });
  GRADUS_CUDA_CHECK_LAUNCH("attention_backward (delta)");
}

}  // namespace gradus::backend::cuda
