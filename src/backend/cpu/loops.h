// Internal helpers shared by the CPU kernels: OpenMP partitioning, strided iteration over several
// operands with dimension coalescing, and element conversion between dtypes.
//
// The strided iterator walks the output in row-major order. Adjacent dims whose strides line up in
// every operand are merged, so a contiguous (or uniformly broadcast) tensor of any rank becomes a
// single 1-D run and the per-run callback sees raw pointers plus one byte stride per operand.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/common/layout.h"
#include "gradus/core/tensor.h"

namespace gradus::backend::cpu {

// Below this many elements a loop runs on the calling thread: waking the OpenMP team costs more
// than the work.
inline constexpr int64_t kGrain = 32768;

// Threads worth waking for `work` units (elements, multiply-adds) when each should get at least
// `grain`: 1 for small work, so a tiny op never opens a team. Besides the wake-up cost, a team's
// barriers spin, and with another busy process on the same cores (two ranks, a test run with -j2)
// every barrier of a tiny op can cost a whole time slice.
inline int threads_for(int64_t work, int64_t grain) {
  const int64_t most = omp_get_max_threads();
  return static_cast<int>(std::clamp<int64_t>(work / std::max<int64_t>(grain, 1), 1, most));
}

// Calls fn(begin, end) on disjoint, contiguous parts of [0, n), one per thread, with at most
// ceil(n / grain) threads. fn must not throw.
template <typename F>
void parallel_for(int64_t n, int64_t grain, const F& fn) {
  if (n <= 0) return;
  int64_t threads = omp_get_max_threads();
  threads = std::min<int64_t>(threads,
                              (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1));
  if (threads <= 1 || omp_in_parallel()) {
    fn(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(static_cast <int>(threads))
  {
    const int64_t t = omp_get_thread_num(), count = omp_get_num_threads();
    const int64_t chunk = (n + count - 1) / count;
    const int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (begin < end) fn(begin, end);
  }
}

// ------------------------------------------------------------------------------ strided layout
template <int N>
struct StridedLayout {
  std::vector<int64_t> sizes;                   // coalesced dims, outermost first
  std::vector<std::array<int64_t, N>> strides;  // byte strides, per dim, per operand
  int64_t numel = 1;
};

// Layout of N operands that all have shape `shape` (operand 0 is usually the output).
template <int N>
StridedLayout<N> make_layout(const Shape& shape, const std::array<const Tensor*, N>& ts) {
  std::array<int64_t, N> element_size;
  for (int k = 0; k < N; ++k) element_size[k] = static_cast<int64_t>(ts[k]->element_size());
  common::CoalescedDims<N> dims = common::coalesce_dims<N>(shape, ts, element_size);
  StridedLayout<N> layout;
  layout.sizes = std::move(dims.sizes);
  layout.strides = std::move(dims.strides);
  layout.numel = shape_numel(shape);
  return layout;
}

// Visits elements [begin, end) of the layout (row-major) as runs along the innermost dim:
// fn(char* const* ptrs, const int64_t* byte_strides, int64_t n, int64_t first_index).
template <int N, typename F>
void iterate_runs(const StridedLayout<N>& layout, const std::array<char*, N>& base, int64_t begin,
                  int64_t end, const F& fn) {
  if (begin >= end) return;
  const int64_t nd = static_cast<int64_t>(layout.sizes.size());
  if (nd == 0) {  // a single element
    const std::array<int64_t, N> zero{};
    fn(base.data(), zero.data(), int64_t{1}, begin);
    return;
  }
  int64_t idx_small[16];
  std::vector<int64_t> idx_big;
  if (nd > 16) idx_big.resize(static_cast<size_t>(nd));
  int64_t* idx = nd > 16 ? idx_big.data() : idx_small;
  std::array<char*, N> p = base;
  int64_t rem = begin;
  for (int64_t d = nd - 1; d >= 0; --d) {
    idx[d] = rem % layout.sizes[d];
    rem /= layout.sizes[d];
    for (int k = 0; k < N; ++k) p[k] += idx[d] * layout.strides[d][k];
  }
  const int64_t inner_size = layout.sizes[nd - 1];
  const auto& inner = layout.strides[nd - 1];
  int64_t pos = begin;
  while (pos < end) {
    const int64_t n = std::min(inner_size - idx[nd - 1], end - pos);
    fn(p.data(), inner.data(), n, pos);
    pos += n;
    idx[nd - 1] += n;
    for (int k = 0; k < N; ++k) p[k] += n * inner[k];
    if (idx[nd - 1] < inner_size) continue;
    // Carry into the outer dims.
    idx[nd - 1] = 0;
    for (int k = 0; k < N; ++k) p[k] -= inner_size * inner[k];
    for (int64_t d = nd - 2; d >= 0; --d) {
      ++idx[d];
      for (int k = 0; k < N; ++k) p[k] += layout.strides[d][k];
      if (idx[d] < layout.sizes[d]) break;
      idx[d] = 0;
      for (int k = 0; k < N; ++k) p[k] -= layout.sizes[d] * layout.strides[d][k];
    }
  }
}

// Runs fn over all elements of operands that share ts[0]'s shape, in parallel when large.
template <int N, typename F>
void for_each_run(const std::array<const Tensor*, N>& ts, const F& fn, int64_t grain = kGrain) {
  const StridedLayout<N> layout = make_layout<N>(ts[0]->sizes(), ts);
  std::array<char*, N> base;
  for (int k = 0; k < N; ++k) base[k] = static_cast<char*>(ts[k]->raw_data());
  parallel_for(layout.numel, grain,
               [&](int64_t begin, int64_t end) { iterate_runs<N>(layout, base, begin, end, fn); });
}

// ---------------------------------------------------------------------------- conversions
template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Float -> integer like PyTorch on x86: truncation, and the type's minimum for NaN or out of range
// (never undefined behaviour). Narrow types (u8) go through int64 and wrap.
template <typename I>
inline I float_to_int(double v) {
  if constexpr (std::is_same_v<I, int32_t>) {
    return v > -2147483649.0 && v < 2147483648.0 ? static_cast<int32_t>(v)
                                                 : std::numeric_limits<int32_t>::min();
  } else {
    const int64_t w = v >= -9223372036854775808.0 && v < 9223372036854775808.0
                          ? static_cast<int64_t>(v)
                          : std::numeric_limits<int64_t>::min();
    return static_cast<I>(w);
  }
}

// Converts one value between any two of the eight element types.
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_half_v<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (is_half_v<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) {
    return float_to_int<To>(static_cast<double>(v));
  } else {
    return static_cast<To>(v);
  }
}

// buf[i] = convert<C>(element i of a strided run of dtype dt).
template <typename C>
void load_run(const char* p, int64_t stride, DType dt, C* buf, int64_t n) {
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    if (stride == static_cast<int64_t>(sizeof(T))) {
      const T* src = reinterpret_cast<const T*>(p);
      for (int64_t i = 0; i < n; ++i) buf[i] = convert<C>(src[i]);
    } else if (stride == 0) {  // a broadcast operand (a 0-d scale, a bias): one value, filled
      std::fill(buf, buf + n, convert<C>(*reinterpret_cast<const T*>(p)));
    } else {
      for (int64_t i = 0; i < n; ++i)
        buf[i] = convert<C>(*reinterpret_cast<const T*>(p + i * stride));
    }
  });
}

// Element i of a strided run of dtype dt = convert(buf[i]).
template <typename C>
void store_run(const C* buf, char* p, int64_t stride, DType dt, int64_t n) {
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    if (stride == static_cast<int64_t>(sizeof(T))) {
      T* dst = reinterpret_cast<T*>(p);
      for (int64_t i = 0; i < n; ++i) dst[i] = convert<T>(buf[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p + i * stride) = convert<T>(buf[i]);
    }
  });
}

// Elements processed per block by kernels that stage strided or half-precision data in buffers.
inline constexpr int64_t kBlock = 512;

// Runs kernel(const C* const* in, R* out, int64_t n) over blocks of the operands (out first, then
// NIN inputs, all of out's shape). Inputs already of dtype C and unit stride are passed in place;
// others are converted into per-thread buffers. The same holds for the output with type R.
template <typename C, typename R, int NIN, typename K>
void blocked_map(const Tensor& out, const std::array<const Tensor*, NIN>& ins, const K& kernel) {
  std::array<const Tensor*, NIN + 1> ts;
  ts[0] = &out;
  std::array<DType, NIN + 1> dts;
  dts[0] = out.dtype();
  for (int k = 0; k < NIN; ++k) {
    ts[k + 1] = ins[k];
    dts[k + 1] = ins[k]->dtype();
  }
  constexpr DType c_dtype = DTypeOf<C>::value;
  constexpr DType r_dtype = DTypeOf<R>::value;
  for_each_run<NIN + 1>(ts, [&](char* const* ptrs, const int64_t* strides, int64_t n, int64_t) {
    alignas(64) C in_buf[NIN][kBlock];
    alignas(64) R out_buf[kBlock];
    for (int64_t off = 0; off < n; off += kBlock) {
      const int64_t m = std::min(kBlock, n - off);
      const C* in[NIN];
      for (int k = 0; k < NIN; ++k) {
        const char* p = ptrs[k + 1] + off * strides[k + 1];
        if (dts[k + 1] == c_dtype && strides[k + 1] == static_cast<int64_t>(sizeof(C))) {
          in[k] = reinterpret_cast<const C*>(p);
        } else {
          load_run<C>(p, strides[k + 1], dts[k + 1], in_buf[k], m);
          in[k] = in_buf[k];
        }
      }
      char* po = ptrs[0] + off * strides[0];
      if (dts[0] == r_dtype && strides[0] == static_cast<int64_t>(sizeof(R))) {
        kernel(in, reinterpret_cast<R*>(po), m);
      } else {
        kernel(in, out_buf, m);
        store_run<R>(out_buf, po, strides[0], dts[0], m);
      }
    }
  });
}

// The type elementwise math runs in for a storage dtype: f64 in double, other floats in float,
// integers and bool in int64.
enum class ComputeKind { f32, f64, i64 };
inline ComputeKind compute_kind(DType t) {
  switch (t) {
    case DType::f64:
      return ComputeKind::f64;
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      return ComputeKind::f32;
    default:
      return ComputeKind::i64;
  }
}

}  // namespace gradus::backend::cpu
