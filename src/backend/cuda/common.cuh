// Device helpers shared by the kernel files: storage types, dtype conversions identical to the CPU
// backend's (src/backend/cpu/loops.h), 32-bit strided offset computation, dtype dispatch and
// launch sizing. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"

namespace gradus::backend::cuda {

// ------------------------------------------------------------------------- storage types
// 16-bit floats as raw bits: conversions are written out below so that they match the CPU's
// bit for bit (including the NaN payloads it produces).
struct f16_t {
  uint16_t bits;
};
struct bf16_t {
  uint16_t bits;
};

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, f16_t> || std::is_same_v<T, bf16_t>;

// The type arithmetic runs in, like the CPU: float for f32/f16/bf16, double for f64, int64 for
// integers and bool.
template <typename T>
struct ComputeOf {
  using type = int64_t;
};
template <>
struct ComputeOf<float> {
  using type = float;
};
template <>
struct ComputeOf<f16_t> {
  using type = float;
};
template <>
struct ComputeOf<bf16_t> {
  using type = float;
};
template <>
struct ComputeOf<double> {
  using type = double;
};
template <typename T>
using compute_t = typename ComputeOf<T>::type;

// Wider accumulator for reductions: double for f64, float for the other floats, int64 for ints.
template <typename T>
using acc_t = compute_t<T>;

__device__ __forceinline__ float f16_to_float(f16_t h) {
  return __half2float(__ushort_as_half(h.bits));
}
__device__ __forceinline__ f16_t float_to_f16(float f) {
  if (f != f) return {static_cast<uint16_t>((__float_as_uint(f) >> 16 & 0x8000u) | 0x7e00u)};
  return {__half_as_ushort(__float2half_rn(f))};
}
__device__ __forceinline__ float bf16_to_float(bf16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b.bits) << 16);
}
__device__ __forceinline__ bf16_t float_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}

// Float -> integer like the CPU: truncation; the type's minimum for NaN or out of range; narrow
// types go through int64 and wrap.
template <typename I>
__device__ __forceinline__ I float_to_int(double v) {
  if constexpr (std::is_same_v<I, int32_t>) {
    return v > -2147483649.0 && v < 2147483648.0 ? static_cast<int32_t>(v) : INT32_MIN;
  } else {
    const int64_t w = v >= -9223372036854775808.0 && v < 9223372036854775808.0
                          ? static_cast<int64_t>(v)
                          : INT64_MIN;
    return static_cast<I>(w);
  }
}

// Converts one value between any two of the storage / compute types (CPU's convert<>).
template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, f16_t>) {
    return convert<To>(f16_to_float(v));
  } else if constexpr (std::is_same_v<From, bf16_t>) {
    return convert<To>(bf16_to_float(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, f16_t>) {
    return float_to_f16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bf16_t>) {
    return float_to_bf16(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    return float_to_int<To>(static_cast<double>(v));
  } else {
    return static_cast<To>(v);
  }
}

template <typename T>
__device__ __forceinline__ compute_t<T> load(const T* p) {
  return convert<compute_t<T>>(*p);
}

// Reads / writes one element of a dtype only known at run time.
template <typename C>
__device__ __forceinline__ C load_dyn(const void* p, DType t) {
  switch (t) {
    case DType::f32:
      return convert<C>(*static_cast<const float*>(p));
    case DType::f64:
      return convert<C>(*static_cast<const double*>(p));
    case DType::f16:
      return convert<C>(*static_cast<const f16_t*>(p));
    case DType::bf16:
      return convert<C>(*static_cast<const bf16_t*>(p));
    case DType::i32:
      return convert<C>(*static_cast<const int32_t*>(p));
    case DType::i64:
      return convert<C>(*static_cast<const int64_t*>(p));
    case DType::u8:
      return convert<C>(*static_cast<const uint8_t*>(p));
    case DType::boolean:
      return convert<C>(*static_cast<const bool*>(p));
  }
  return C(0);
}

template <typename C>
__device__ __forceinline__ void store_dyn(void* p, DType t, C v) {
  switch (t) {
    case DType::f32:
      *static_cast<float*>(p) = convert<float>(v);
      return;
    case DType::f64:
      *static_cast<double*>(p) = convert<double>(v);
      return;
    case DType::f16:
      *static_cast<f16_t*>(p) = convert<f16_t>(v);
      return;
    case DType::bf16:
      *static_cast<bf16_t*>(p) = convert<bf16_t>(v);
      return;
    case DType::i32:
      *static_cast<int32_t*>(p) = convert<int32_t>(v);
      return;
    case DType::i64:
      *static_cast<int64_t*>(p) = convert<int64_t>(v);
      return;
    case DType::u8:
      *static_cast<uint8_t*>(p) = convert<uint8_t>(v);
      return;
    case DType::boolean:
      *static_cast<bool*>(p) = convert<bool>(v);
      return;
  }
}

__host__ __device__ __forceinline__ int dtype_bytes(DType t) {
  switch (t) {
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    default:
      return 1;
  }
}

// ------------------------------------------------------------------------- dtype dispatch
// Host side: calls fn(T{}) with T the storage type of `t`.
template <typename Fn>
void dispatch_all(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    case DType::f16:
      return fn(f16_t{});
    case DType::bf16:
      return fn(bf16_t{});
    case DType::i32:
      return fn(int32_t{});
    case DType::i64:
      return fn(int64_t{});
    case DType::u8:
      return fn(uint8_t{});
    case DType::boolean:
      return fn(bool{});
  }
}

template <typename Fn>
void dispatch_float(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    case DType::f16:
      return fn(f16_t{});
    case DType::bf16:
      return fn(bf16_t{});
    default:
      throw DTypeError(std::string(op) + ": cuda kernel expects a floating dtype");
  }
}

// ------------------------------------------------------------------------- strided offsets
// Per-operand element offsets of linear index i over up to kMaxDims dims, in 32-bit index math.
// Dims are stored innermost first.
template <int N>
struct OffsetCalc {
  int ndim;
  uint32_t sizes[kMaxDims];
  int64_t strides[kMaxDims][N];

  __device__ __forceinline__ void get(uint32_t linear, int64_t (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      const uint32_t q = linear / sizes[d];
      const uint32_t r = linear - q * sizes[d];
      linear = q;
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(r) * strides[d][k];
    }
  }
};

// Builds the device calculator for operands `which` (indices into it) of a host iterator.
template <int N, int M>
OffsetCalc<N> make_offset_calc(const Iter<M>& it, const int (&which)[N]) {
  OffsetCalc<N> oc{};
  oc.ndim = it.ndim;
  for (int d = 0; d < it.ndim; ++d) {
    const int src = it.ndim - 1 - d;  // innermost first
    oc.sizes[d] = static_cast<uint32_t>(it.sizes[src]);
    for (int k = 0; k < N; ++k) oc.strides[d][k] = it.strides[which[k]][src];
  }
  return oc;
}

template <int N>
OffsetCalc<N> make_offset_calc(const Iter<N>& it) {
  int which[N];
  for (int k = 0; k < N; ++k) which[k] = k;
  return make_offset_calc<N, N>(it, which);
}

// ------------------------------------------------------------------------- launch sizing
inline constexpr int kThreads = 256;

inline unsigned int blocks_for(int64_t work, int per_block) {
  const int64_t b = (work + per_block - 1) / per_block;
  return static_cast<unsigned int>(b < 1 ? 1 : (b > 0x7fffffff ? 0x7fffffff : b));
}

// ------------------------------------------------------------------------- warp / block reduce
template <typename T, typename F>
__device__ __forceinline__ T warp_reduce(T v, F combine) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = combine(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  return warp_reduce(v, [](float a, float b) { return a + b; });
}
__device__ __forceinline__ double warp_sum(double v) {
  return warp_reduce(v, [](double a, double b) { return a + b; });
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 values.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // shared may be reused from a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? shared[lane] : T(0);
  return warp_sum(v);
}

// Sum over one row's threads: its warp (warp rows) or the whole block. Each path reduces once:
// block_sum starts with its own warp_sum, so reducing the warp first would count every value 32
// times.
template <typename T>
__device__ __forceinline__ T row_sum(T v, bool warp, T* shared) {
  return warp ? warp_sum(v) : block_sum(v, shared);
}

template <typename T>
__device__ __forceinline__ T block_max(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_reduce(v, [](T a, T b) { return a > b ? a : b; });
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = lane < warps ? shared[lane] : shared[0];
  return warp_reduce(v, [](T a, T b) { return a > b ? a : b; });
}

// ------------------------------------------------------------------------- math overloads
__device__ __forceinline__ float m_exp(float x) {
  return expf(x);
}
__device__ __forceinline__ double m_exp(double x) {
  return exp(x);
}
__device__ __forceinline__ float m_log(float x) {
  return logf(x);
}
__device__ __forceinline__ double m_log(double x) {
  return log(x);
}
__device__ __forceinline__ float m_sqrt(float x) {
  return sqrtf(x);
}
__device__ __forceinline__ double m_sqrt(double x) {
  return sqrt(x);
}

}  // namespace gradus::backend::cuda
