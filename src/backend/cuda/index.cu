// Embedding-style row gather / scatter-add and torch.gather / scatter_add_. Accumulation uses
// atomics (float, double, int32, int64 natively; 16-bit floats natively on sm_80+; bytes and
// older targets through compare-and-swap on the containing 32-bit word), except in deterministic
// mode, where the row scatter-add sums in index order (add_rows_ordered_kernel) and scatter_add
// of floats refuses (misc.cpp).
#include <algorithm>

#include "backend/cuda/common.cuh"

namespace gradus::backend::cuda {
namespace {

// ------------------------------------------------------------------------------- atomics
// Adds v to the sub-word element at p (1 or 2 bytes) with a CAS loop on its 32-bit word.
template <typename T, typename F>
__device__ __forceinline__ void atomic_update_subword(T* p, F update) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  auto* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t{3});
  const unsigned int shift = static_cast<unsigned int>(addr & 3) * 8;
  const unsigned int mask = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
  unsigned int old = *word, assumed;
  do {
    assumed = old;
    T cur;
    const auto bits = static_cast<uint16_t>((assumed & mask) >> shift);
    if constexpr (sizeof(T) == 1) {
      cur = static_cast<T>(bits);
    } else {
      memcpy(&cur, &bits, 2);
    }
    const T next = update(cur);
    unsigned int nb;
    if constexpr (sizeof(T) == 1) {
      nb = static_cast<unsigned int>(static_cast<uint8_t>(next));
    } else {
      uint16_t b;
      memcpy(&b, &next, 2);
      nb = b;
    }
    old = atomicCAS(word, assumed, (assumed & ~mask) | (nb << shift));
  } while (old != assumed);
}

// dst += v with the CPU's accumulation type (float for 16-bit floats, logical or for bool).
template <typename T>
__device__ __forceinline__ void atomic_accumulate(T* p, T v) {
  if constexpr (std::is_same_v<T, float>) {
    atomicAdd(p, v);
  } else if constexpr (std::is_same_v<T, double>) {
    atomicAdd(p, v);
  } else if constexpr (std::is_same_v<T, int32_t>) {
    atomicAdd(reinterpret_cast<int*>(p), v);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, f16_t>) {
#if __CUDA_ARCH__ >= 700
    atomicAdd(reinterpret_cast<__half*>(p), __ushort_as_half(v.bits));
#else
    atomic_update_subword(
        p, [v](f16_t cur) { return float_to_f16(f16_to_float(cur) + f16_to_float(v)); });
#endif
  } else if constexpr (std::is_same_v<T, bf16_t>) {
#if __CUDA_ARCH__ >= 800
    atomicAdd(reinterpret_cast<__nv_bfloat16*>(p), __ushort_as_bfloat16(v.bits));
#else
    atomic_update_subword(
        p, [v](bf16_t cur) { return float_to_bf16(bf16_to_float(cur) + bf16_to_float(v)); });
#endif
  } else if constexpr (std::is_same_v<T, bool>) {
    if (v) atomic_update_subword(p, [](bool) { return true; });
  } else {  // uint8: wraps like the CPU's int64 add then narrowing
    atomic_update_subword(p, [v](uint8_t cur) { return static_cast<uint8_t>(cur + v); });
  }
}

// ------------------------------------------------------------------------------- rows
template <typename W>
__global__ void __launch_bounds__(kThreads)
    select_rows_kernel(const W* table, const int64_t* index, W* out, int64_t n, int64_t words,
                       int64_t rows) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * words) return;
  const int64_t row = i / words, k = i - row * words;
  const int64_t r = index[row];
  out[i] = r >= 0 && r < rows ? table[r * words + k] : W{};
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    add_rows_kernel(const T* g, const int64_t* index, T* table, int64_t n, int64_t width,
                    int64_t rows) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * width) return;
  const int64_t row = i / width, k = i - row * width;
  const int64_t r = index[row];
  if (r >= 0 && r < rows) atomic_accumulate(table + r * width + k, g[i]);
}

// Deterministic mode's add_rows: no atomics. Thread (k, part) owns column k of the table rows
// [part * rows_per, (part + 1) * rows_per) and walks the whole index in order, adding the rows
// that land in its part: every sum runs in index order, so the bits never change from run to
// run. Each index entry is read by every part (a broadcast load, cached); the parts give the
// parallelism a single pass over the columns would lack.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    add_rows_ordered_kernel(const T* g, const int64_t* index, T* table, int64_t n, int64_t width,
                            int64_t rows_per, int64_t rows) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= width) return;
  const int64_t lo = static_cast<int64_t>(blockIdx.y) * rows_per;
  const int64_t hi = lo + rows_per < rows ? lo + rows_per : rows;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = index[i];
    if (row < lo || row >= hi) continue;
    T* dst = table + row * width + k;
    if constexpr (std::is_same_v<T, bool>) {
      *dst = *dst || g[i * width + k];
    } else if constexpr (std::is_integral_v<T>) {
      *dst = static_cast<T>(*dst + g[i * width + k]);
    } else {
      using C = compute_t<T>;
      *dst = convert<T>(static_cast<C>(load(dst)) + static_cast<C>(load(g + i * width + k)));
    }
  }
}

// ------------------------------------------------------------------------------- gather
template <typename T>
__global__ void __launch_bounds__(kThreads)
    gather_kernel(OffsetCalc<3> oc, T* out, const int64_t* index, const T* x, int64_t dim_stride,
                  int64_t dim_size, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[3];
  oc.get(i, off);
  const int64_t j = index[off[1]];
  out[off[0]] = j >= 0 && j < dim_size ? x[off[2] + j * dim_stride] : T{};
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    scatter_add_kernel(OffsetCalc<3> oc, T* self, const int64_t* index, const T* src,
                       int64_t dim_stride, int64_t dim_size, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t off[3];
  oc.get(i, off);
  const int64_t j = index[off[1]];
  if (j >= 0 && j < dim_size) atomic_accumulate(self + off[0] + j * dim_stride, src[off[2]]);
}

// ------------------------------------------------------------------------------- checks
__global__ void __launch_bounds__(kThreads)
    check_index_range_kernel(const int64_t* index, int64_t n, int64_t size, bool has_allowed,
                             int64_t allowed, int site, int* claim, DeviceIndexError* error) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t v = index[i];
  if ((v >= 0 && v < size) || (has_allowed && v == allowed)) return;
  // The first finder writes the record; the host reads it only after a sync.
  if (atomicCAS(claim, 0, 1) == 0) {
    error->site = site;
    error->value = v;
    __threadfence_system();  // the fields before the flag, as the host sees them
    error->flag = 1;
  }
}

}  // namespace

void launch_check_index_range(const int64_t* index, int64_t n, int64_t size, bool has_allowed,
                              int64_t allowed, int site, int* claim, DeviceIndexError* error,
                              cudaStream_t stream) {
  if (n == 0) return;
  check_index_range_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      index, n, size, has_allowed, allowed, site, claim, error);
  GRADUS_CUDA_CHECK_LAUNCH("check_index_range");
}

void launch_index_select_rows(const void* table, const int64_t* index, void* out, int64_t n,
                              int64_t row_bytes, int64_t rows, cudaStream_t stream) {
  if (n == 0 || row_bytes == 0) return;
  // Widest word that divides the row and the alignment of both buffers.
  const auto a = reinterpret_cast<uintptr_t>(table) | reinterpret_cast<uintptr_t>(out) |
                 static_cast<uintptr_t>(row_bytes);
  auto run = [&](auto word) {
    using W = decltype(word);
    const int64_t words = row_bytes / static_cast<int64_t>(sizeof(W));
    select_rows_kernel<W><<<blocks_for(n * words, kThreads), kThreads, 0, stream>>>(
        static_cast<const W*>(table), index, static_cast<W*>(out), n, words, rows);
  };
  if (a % 16 == 0) {
    run(uint4{});
  } else if (a % 8 == 0) {
    run(uint2{});
  } else if (a % 4 == 0) {
    run(uint32_t{});
  } else if (a % 2 == 0) {
    run(uint16_t{});
  } else {
    run(uint8_t{});
  }
  GRADUS_CUDA_CHECK_LAUNCH("index_select_rows");
}

void launch_index_add_rows(const void* grad_out, const int64_t* index, void* grad_table,
                           DType dtype, int64_t n, int64_t width, int64_t rows, bool ordered,
                           cudaStream_t stream) {
  if (n == 0 || width == 0) return;
  dispatch_all(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (ordered) {
      // Enough parts for ~64 blocks in all, each part at least one row.
      const int64_t col_blocks = blocks_for(width, kThreads);
      const int64_t parts = std::clamp<int64_t>(64 / col_blocks, 1, std::max<int64_t>(rows, 1));
      const int64_t rows_per = (rows + parts - 1) / parts;
      const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(parts));
      add_rows_ordered_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(grad_out),
                                                                index, static_cast<T*>(grad_table),
                                                                n, width, rows_per, rows);
    } else {
      add_rows_kernel<T><<<blocks_for(n * width, kThreads), kThreads, 0, stream>>>(
          static_cast<const T*>(grad_out), index, static_cast<T*>(grad_table), n, width, rows);
    }
  });
  GRADUS_CUDA_CHECK_LAUNCH("index_add_rows");
}

void launch_gather(const Iter<3>& it, int64_t dim_stride, int64_t dim_size, cudaStream_t stream) {
  if (it.numel == 0) return;
  const auto n = static_cast<uint32_t>(it.numel);
  dispatch_all(it.dtype[0], [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        make_offset_calc(it), static_cast<T*>(it.data[0]), static_cast<const int64_t*>(it.data[1]),
        static_cast<const T*>(it.data[2]), dim_stride, dim_size, n);
  });
  GRADUS_CUDA_CHECK_LAUNCH("gather");
}

void launch_scatter_add(const Iter<3>& it, int64_t dim_stride, int64_t dim_size,
                        cudaStream_t stream) {
  if (it.numel == 0) return;
  const auto n = static_cast<uint32_t>(it.numel);
  dispatch_all(it.dtype[0], [&](auto tag) {
    using T = decltype(tag);
    scatter_add_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        make_offset_calc(it), static_cast<T*>(it.data[0]), static_cast<const int64_t*>(it.data[1]),
        static_cast<const T*>(it.data[2]), dim_stride, dim_size, n);
  });
  GRADUS_CUDA_CHECK_LAUNCH("scatter_add");
}

}  // namespace gradus::backend::cuda
