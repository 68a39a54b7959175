// The elementwise engine: maps of 1, 2 or 3 inputs into one output, with a vectorised contiguous
// path (16-byte accesses when every pointer is aligned) and a general strided path (32-bit
// offset math over up to kMaxDims dims, broadcast strides included). Functors take compute-type
// values (compute_t of each input) and return a value that is converted to the output type.
#pragma once

#include <algorithm>

#include "backend/cuda/common.cuh"

namespace gradus::backend::cuda {

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// Elements per thread on the contiguous path: 16 bytes of the widest operand, at most 8.
template <typename... Ts>
constexpr int vec_width() {
  constexpr size_t widest = std::max({sizeof(Ts)...});
  constexpr size_t v = 16 / widest;
  return static_cast<int>(v > 8 ? 8 : (v < 1 ? 1 : v));
}

template <int V, typename... Ts>
bool all_aligned(const Ts*... ptrs) {
  return ((reinterpret_cast<uintptr_t>(ptrs) % (sizeof(Ts) * V) == 0) && ...);
}

// --------------------------------------------------------------------------------- kernels
template <int V, typename TO, typename TA, typename F>
__global__ void __launch_bounds__(kThreads)
    map1_contig(TO* out, const TA* a, uint32_t n, bool aligned, F f) {
  const int64_t base = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (base >= n) return;
  if (aligned && base + V <= n) {
    const Vec<TA, V> va = *reinterpret_cast<const Vec<TA, V>*>(a + base);
    Vec<TO, V> vo;
#pragma unroll
    for (int j = 0; j < V; ++j) vo.v[j] = convert<TO>(f(convert<compute_t<TA>>(va.v[j])));
    *reinterpret_cast<Vec<TO, V>*>(out + base) = vo;
  } else {
    for (int64_t i = base; i < base + V && i < n; ++i) out[i] = convert<TO>(f(load(a + i)));
  }
}

template <typename TO, typename TA, typename F>
__global__ void __launch_bounds__(kThreads)
    map1_strided(OffsetCalc<2> oc, TO* out, const TA* a, uint32_t n, F f) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[2];
  oc.get(i, off);
  out[off[0]] = convert<TO>(f(load(a + off[1])));
}

template <int V, typename TO, typename TA, typename TB, typename F>
__global__ void __launch_bounds__(kThreads)
    map2_contig(TO* out, const TA* a, const TB* b, uint32_t n, bool aligned, F f) {
  const int64_t base = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (base >= n) return;
  if (aligned && base + V <= n) {
    const Vec<TA, V> va = *reinterpret_cast<const Vec<TA, V>*>(a + base);
    const Vec<TB, V> vb = *reinterpret_cast<const Vec<TB, V>*>(b + base);
    Vec<TO, V> vo;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      vo.v[j] = convert<TO>(f(convert<compute_t<TA>>(va.v[j]), convert<compute_t<TB>>(vb.v[j])));
    }
    *reinterpret_cast<Vec<TO, V>*>(out + base) = vo;
  } else {
    for (int64_t i = base; i < base + V && i < n; ++i) {
      out[i] = convert<TO>(f(load(a + i), load(b + i)));
    }
  }
}

template <typename TO, typename TA, typename TB, typename F>
__global__ void __launch_bounds__(kThreads)
    map2_strided(OffsetCalc<3> oc, TO* out, const TA* a, const TB* b, uint32_t n, F f) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[3];
  oc.get(i, off);
  out[off[0]] = convert<TO>(f(load(a + off[1]), load(b + off[2])));
}

template <int V, typename TO, typename TA, typename TB, typename TC, typename F>
__global__ void __launch_bounds__(kThreads)
    map3_contig(TO* out, const TA* a, const TB* b, const TC* c, uint32_t n, bool aligned, F f) {
  const int64_t base = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (base >= n) return;
  if (aligned && base + V <= n) {
    const Vec<TA, V> va = *reinterpret_cast<const Vec<TA, V>*>(a + base);
    const Vec<TB, V> vb = *reinterpret_cast<const Vec<TB, V>*>(b + base);
    const Vec<TC, V> vc = *reinterpret_cast<const Vec<TC, V>*>(c + base);
    Vec<TO, V> vo;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      vo.v[j] = convert<TO>(f(convert<compute_t<TA>>(va.v[j]), convert<compute_t<TB>>(vb.v[j]),
                              convert<compute_t<TC>>(vc.v[j])));
    }
    *reinterpret_cast<Vec<TO, V>*>(out + base) = vo;
  } else {
    for (int64_t i = base; i < base + V && i < n; ++i) {
      out[i] = convert<TO>(f(load(a + i), load(b + i), load(c + i)));
    }
  }
}

template <typename TO, typename TA, typename TB, typename TC, typename F>
__global__ void __launch_bounds__(kThreads)
    map3_strided(OffsetCalc<4> oc, TO* out, const TA* a, const TB* b, const TC* c, uint32_t n,
                 F f) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[4];
  oc.get(i, off);
  out[off[0]] = convert<TO>(f(load(a + off[1]), load(b + off[2]), load(c + off[3])));
}

// --------------------------------------------------------------------------------- launchers
template <typename TO, typename TA, typename F>
void map1(const Iter<2>& it, F f, cudaStream_t stream, const char* op) {
  if (it.numel == 0) return;
  auto* out = static_cast<TO*>(it.data[0]);
  const auto* a = static_cast<const TA*>(it.data[1]);
  const auto n = static_cast<uint32_t>(it.numel);
  if (it.contiguous()) {
    constexpr int V = vec_width<TO, TA>();
    map1_contig<V><<<blocks_for(n, kThreads * V), kThreads, 0, stream>>>(out, a, n,
                                                                         all_aligned<V>(out, a), f);
  } else {
    map1_strided<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(make_offset_calc(it), out, a, n,
                                                                   f);
  }
  GRADUS_CUDA_CHECK_LAUNCH(op);
}

template <typename TO, typename TA, typename TB, typename F>
void map2(const Iter<3>& it, F f, cudaStream_t stream, const char* op) {
  if (it.numel == 0) return;
  auto* out = static_cast<TO*>(it.data[0]);
  const auto* a = static_cast<const TA*>(it.data[1]);
  const auto* b = static_cast<const TB*>(it.data[2]);
  const auto n = static_cast<uint32_t>(it.numel);
  if (it.contiguous()) {
    constexpr int V = vec_width<TO, TA, TB>();
    map2_contig<V><<<blocks_for(n, kThreads * V), kThreads, 0, stream>>>(
        out, a, b, n, all_aligned<V>(out, a, b), f);
  } else {
    map2_strided<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(make_offset_calc(it), out, a, b,
                                                                   n, f);
  }
  GRADUS_CUDA_CHECK_LAUNCH(op);
}

template <typename TO, typename TA, typename TB, typename TC, typename F>
void map3(const Iter<4>& it, F f, cudaStream_t stream, const char* op) {
  if (it.numel == 0) return;
  auto* out = static_cast<TO*>(it.data[0]);
  const auto* a = static_cast<const TA*>(it.data[1]);
  const auto* b = static_cast<const TB*>(it.data[2]);
  const auto* c = static_cast<const TC*>(it.data[3]);
  const auto n = static_cast<uint32_t>(it.numel);
  if (it.contiguous()) {
    constexpr int V = vec_width<TO, TA, TB, TC>();
    map3_contig<V><<<blocks_for(n, kThreads * V), kThreads, 0, stream>>>(
        out, a, b, c, n, all_aligned<V>(out, a, b, c), f);
  } else {
    map3_strided<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(make_offset_calc(it), out, a, b,
                                                                   c, n, f);
  }
  GRADUS_CUDA_CHECK_LAUNCH(op);
}

}  // namespace gradus::backend::cuda
