// Random kernels on the shared Philox4x32-10 stream, bit-identical to the CPU backend
// (src/backend/cpu/random.cpp documents the formulas). Each thread computes one Philox block and
// writes the (up to) four elements that use it. Roundings are spelled out with explicit fma /
// __f*_rn so the compiler cannot fuse them differently from the CPU.
#include "backend/cuda/common.cuh"
#include "gradus/core/random.h"
#include "gradus/core/random_math.h"

namespace gradus::backend::cuda {
namespace {

__device__ __forceinline__ std::array<uint32_t, 4> block_at(PhiloxState s, uint64_t g) {
  return philox4x32(s.offset + g, s.seed);
}

// Calls fn(element, word) for the elements of Philox block g that lie in [first, first + n).
template <typename F>
__device__ __forceinline__ void for_block(int64_t first, int64_t n, PhiloxState s, const F& fn) {
  const int64_t g = first / 4 + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t begin = max(first, 4 * g), end = min(first + n, 4 * g + 4);
  if (begin >= end) return;
  const std::array<uint32_t, 4> w = block_at(s, static_cast<uint64_t>(g));
  for (int64_t i = begin; i < end; ++i) fn(i, w[static_cast<size_t>(i & 3)]);
}

unsigned int blocks_for_draw(int64_t first, int64_t n, int per_block_elems) {
  const int64_t groups = (first + n + 3) / 4 - first / 4;
  return blocks_for(groups, per_block_elems);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    uniform_float_kernel(T* out, int64_t first, int64_t n, PhiloxState s, float lo, float hi,
                         float range) {
  for_block(first, n, s, [&](int64_t i, uint32_t w) {
    float v = fmaf(uint_to_unit_float(w), range, lo);
    if (v >= hi && hi > lo) v = nextafterf(hi, lo);
    out[i - first] = convert<T>(v);
  });
}

__global__ void __launch_bounds__(kThreads)
    uniform_double_kernel(double* out, int64_t first, int64_t n, PhiloxState s, double lo,
                          double hi) {
  for_block(first, n, s, [&](int64_t i, uint32_t w) {
    const double u = __dmul_rn(static_cast<double>(w), 0x1p-32);
    double v = fma(u, hi - lo, lo);
    if (v >= hi && hi > lo) v = nextafter(hi, lo);
    out[i - first] = v;
  });
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    uniform_int_kernel(T* out, int64_t first, int64_t n, PhiloxState s, int64_t lo,
                       uint64_t range) {
  for_block(first, n, s, [&](int64_t i, uint32_t w) {
    out[i - first] = static_cast<T>(lo + static_cast<int64_t>(w % range));
  });
}

// Ranges wider than 2^32: two words per element, element i from block i / 2.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    uniform_wide_kernel(T* out, int64_t first, int64_t n, PhiloxState s, int64_t lo,
                        uint64_t range) {
  const int64_t g = first / 2 + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t begin = max(first, 2 * g), end = min(first + n, 2 * g + 2);
  if (begin >= end) return;
  const std::array<uint32_t, 4> w = block_at(s, static_cast<uint64_t>(g));
  for (int64_t i = begin; i < end; ++i) {
    const size_t j = static_cast<size_t>(i & 1) * 2;
    const uint64_t v = (static_cast<uint64_t>(w[j + 1]) << 32) | w[j];
    out[i - first] = static_cast<T>(lo + static_cast<int64_t>(v % range));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    normal_kernel(T* out, int64_t first, int64_t n, PhiloxState s, double mean, double std) {
  const int64_t g = first / 4 + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t begin = max(first, 4 * g), end = min(first + n, 4 * g + 4);
  if (begin >= end) return;
  const std::array<float, 4> z = rmath::box_muller(block_at(s, static_cast<uint64_t>(g)));
  for (int64_t i = begin; i < end; ++i) {
    const float v = z[static_cast<size_t>(i & 3)];
    if constexpr (std::is_same_v<T, double>) {
      out[i - first] = fma(static_cast<double>(v), std, mean);
    } else {
      out[i - first] = convert<T>(fmaf(v, static_cast<float>(std), static_cast<float>(mean)));
    }
  }
}

template <typename O>
__global__ void __launch_bounds__(kThreads)
    bernoulli_kernel(OffsetCalc<2> oc, O* out, const void* p, DType pdt, int64_t first, uint32_t n,
                     PhiloxState s) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[2];
  oc.get(i, off);
  const int64_t flat = first + off[0];  // out is contiguous
  const uint32_t w = block_at(s, static_cast<uint64_t>(flat >> 2))[static_cast<size_t>(flat & 3)];
  const double prob =
      load_dyn<double>(static_cast<const char*>(p) + off[1] * dtype_bytes(pdt), pdt);
  out[off[0]] = convert<O>(static_cast<double>(uint_to_unit_float(w)) < prob);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    dropout_kernel(const T* x, T* out, void* mask, DType mdt, int64_t first, int64_t n,
                   PhiloxState s, float p, double scale) {
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const C sc = static_cast<C>(scale);
  for_block(first, n, s, [&](int64_t i, uint32_t w) {
    const int64_t j = i - first;
    const bool keep = uint_to_unit_float(w) >= p;
    const C v = convert<C>(x[j]);
    out[j] = convert<T>(keep ? v * sc : C(0));
    if (mdt == DType::u8 || mdt == DType::boolean) {
      static_cast<uint8_t*>(mask)[j] = keep ? 1 : 0;
    } else {
      store_dyn(static_cast<char*>(mask) + j * dtype_bytes(mdt), mdt, int64_t{keep ? 1 : 0});
    }
  });
}

}  // namespace

void launch_uniform(void* out, DType dtype, int64_t n, int64_t first, PhiloxState s, double lo,
                    double hi, cudaStream_t stream) {
  if (n == 0) return;
  if (dtype == DType::f64) {
    uniform_double_kernel<<<blocks_for_draw(first, n, kThreads), kThreads, 0, stream>>>(
        static_cast<double*>(out), first, n, s, lo, hi);
  } else if (is_floating(dtype)) {
    const float lo_f = static_cast<float>(lo), hi_f = static_cast<float>(hi);
    const float range = static_cast<float>(hi - lo);
    dispatch_float(dtype, "uniform", [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, double>) {
        uniform_float_kernel<T><<<blocks_for_draw(first, n, kThreads), kThreads, 0, stream>>>(
            static_cast<T*>(out), first, n, s, lo_f, hi_f, range);
      }
    });
  } else {
    const auto lo_i = static_cast<int64_t>(lo);
    const auto range = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo_i);
    dispatch_all(dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>) {
        if (range <= (uint64_t{1} << 32)) {
          uniform_int_kernel<T><<<blocks_for_draw(first, n, kThreads), kThreads, 0, stream>>>(
              static_cast<T*>(out), first, n, s, lo_i, range);
        } else {
          const int64_t groups = (first + n + 1) / 2 - first / 2;
          uniform_wide_kernel<T><<<blocks_for(groups, kThreads), kThreads, 0, stream>>>(
              static_cast<T*>(out), first, n, s, lo_i, range);
        }
      }
    });
  }
  GRADUS_CUDA_CHECK_LAUNCH("uniform");
}

void launch_normal(void* out, DType dtype, int64_t n, int64_t first, PhiloxState s, double mean,
                   double std, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    normal_kernel<T><<<blocks_for_draw(first, n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(out), first, n, s, mean, std);
  });
  GRADUS_CUDA_CHECK_LAUNCH("normal");
}

void launch_bernoulli(const Iter<2>& it, int64_t first, PhiloxState s, cudaStream_t stream) {
  if (it.numel == 0) return;
  const auto n = static_cast<uint32_t>(it.numel);
  dispatch_all(it.dtype[0], [&](auto tag) {
    using O = decltype(tag);
    bernoulli_kernel<O><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        make_offset_calc(it), static_cast<O*>(it.data[0]), it.data[1], it.dtype[1], first, n, s);
  });
  GRADUS_CUDA_CHECK_LAUNCH("bernoulli");
}

void launch_dropout(const void* x, void* out, void* mask, DType dtype, DType mask_dtype, int64_t n,
                    int64_t first, double p, PhiloxState s, cudaStream_t stream) {
  if (n == 0) return;
  const double scale = dtype == DType::f64
                           ? 1.0 / (1.0 - p)
                           : static_cast<double>(static_cast<float>(1.0 / (1.0 - p)));
  dispatch_float(dtype, "dropout", [&](auto tag) {
    using T = decltype(tag);
    dropout_kernel<T><<<blocks_for_draw(first, n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(out), mask, mask_dtype, first, n, s,
        static_cast<float>(p), scale);
  });
  GRADUS_CUDA_CHECK_LAUNCH("dropout");
}

}  // namespace gradus::backend::cuda
