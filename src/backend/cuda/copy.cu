// Memory movement kernels: strided copy with casting between any two dtypes, fill, arange.
#include "backend/cuda/elementwise.cuh"

namespace gradus::backend::cuda {
namespace {

// A cast is the identity on compute values: map1 converts source -> compute -> destination,
// which is the CPU's convert<D>(S) for every pair (checked in tests/gpu).
struct Identity {
  template <typename C>
  __device__ __forceinline__ C operator()(C v) const {
    return v;
  }
};

template <int V, typename T>
__global__ void __launch_bounds__(kThreads)
    fill_contig(T* out, uint32_t n, bool aligned, double value) {
  const T v = convert<T>(value);
  const int64_t base = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (base >= n) return;
  if (aligned && base + V <= n) {
    Vec<T, V> vo;
#pragma unroll
    for (int j = 0; j < V; ++j) vo.v[j] = v;
    *reinterpret_cast<Vec<T, V>*>(out + base) = vo;
  } else {
    for (int64_t i = base; i < base + V && i < n; ++i) out[i] = v;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    fill_strided(OffsetCalc<1> oc, T* out, uint32_t n, double value) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[1];
  oc.get(i, off);
  out[off[0]] = convert<T>(value);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    arange_kernel(T* out, int64_t n, double start, double step) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  // Rounded multiply then add (no FMA contraction), as the CPU computes it.
  out[i] = convert<T>(__dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
}

}  // namespace

void launch_copy(const Iter<2>& it, cudaStream_t stream) {
  const DType dt = it.dtype[0], st = it.dtype[1];
  if (dt == st) {
    switch (dtype_bytes(dt)) {
      case 1:
        return map1<uint8_t, uint8_t>(it, Identity{}, stream, "copy");
      case 2:
        return map1<uint16_t, uint16_t>(it, Identity{}, stream, "copy");
      case 4:
        return map1<uint32_t, uint32_t>(it, Identity{}, stream, "copy");
      default:
        return map1<uint64_t, uint64_t>(it, Identity{}, stream, "copy");
    }
  }
  dispatch_all(st, [&](auto s) {
    using S = decltype(s);
    dispatch_all(dt, [&](auto d) {
      using D = decltype(d);
      if constexpr (!std::is_same_v<S, D>) map1<D, S>(it, Identity{}, stream, "copy (cast)");
    });
  });
}

void launch_fill(const Iter<1>& it, double value, cudaStream_t stream) {
  if (it.numel == 0) return;
  const auto n = static_cast<uint32_t>(it.numel);
  dispatch_all(it.dtype[0], [&](auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(it.data[0]);
    if (it.contiguous()) {
      constexpr int V = vec_width<T>();
      fill_contig<V, T><<<blocks_for(n, kThreads * V), kThreads, 0, stream>>>(
          out, n, all_aligned<V>(out), value);
    } else {
      fill_strided<T>
          <<<blocks_for(n, kThreads), kThreads, 0, stream>>>(make_offset_calc(it), out, n, value);
    }
  });
  GRADUS_CUDA_CHECK_LAUNCH("fill");
}

void launch_arange(void* dst, DType dtype, int64_t n, double start, double step,
                   cudaStream_t stream) {
  if (n == 0) return;
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T>
        <<<blocks_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(dst), n, start, step);
  });
  GRADUS_CUDA_CHECK_LAUNCH("arange");
}

}  // namespace gradus::backend::cuda
