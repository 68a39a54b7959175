// Embedding-style row gather/scatter and torch.gather / scatter_add_, and the range check of
// their indices (which the op layer runs before them). Accumulating kernels split the work so that
// no two threads ever write the same element (no atomics, results independent of the thread count).
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/float_args.h"
#include "backend/cpu/loops.h"

namespace gradus::backend::cpu {

void CpuBackend::check_index_range(const Tensor& index, const IndexCheck& check) {
  const int64_t* p = index.data_ptr<int64_t>();
  for (int64_t i = 0, n = index.numel(); i < n; ++i) {
    const int64_t v = p[i];
    if ((v < 0 || v >= check.size) && v != check.allowed) {
      throw IndexError(index_error_message(check, v));
    }
  }
}

namespace {

// The type additions run in: the storage type itself for float/double/integers, float for the
// 16-bit floats, int64 for bool (so bool accumulation is a logical or). (The accumulating kernels
// below stage 16-bit tensors in float32 and round once; the half case remains for the templates
// that dispatch_dtype instantiates.)
template <typename T>
using AddType = std::conditional_t<is_half_v<T>, float,
                                   std::conditional_t<std::is_same_v<T, bool>, int64_t, T>>;

template <typename T>
inline void add_to(T& dst, T src) {
  using A = AddType<T>;
  dst = convert<T>(static_cast<A>(convert<A>(dst) + convert<A>(src)));
}

// Element offsets of outer index o (row-major over sizes[0, dim)) in a contiguous tensor of
// shape `shape`.
int64_t outer_offset(const Shape& sizes, const Shape& strides, int64_t dim, int64_t o) {
  int64_t off = 0;
  for (int64_t d = dim - 1; d >= 0; --d) {
    off += (o % sizes[d]) * strides[d];
    o /= sizes[d];
  }
  return off;
}

// Offsets, in a tensor with `strides`, of the inner index k (row-major over sizes(dim, end)).
std::vector<int64_t> inner_offsets(const Shape& sizes, const Shape& strides, int64_t dim) {
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(dim) + 1; d < sizes.size(); ++d) inner *= sizes[d];
  std::vector<int64_t> offs(static_cast<size_t>(inner));
  for (int64_t k = 0; k < inner; ++k) {
    int64_t rem = k, off = 0;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d > dim; --d) {
      off += (rem % sizes[d]) * strides[d];
      rem /= sizes[d];
    }
    offs[static_cast<size_t>(k)] = off;
  }
  return offs;
}

constexpr int64_t kInnerBlock = 256;

// Visits index elements as (outer o, j along dim, inner k), parallel over (o, block of k) so
// that writes through "o and k" never collide: fn(o, k0, k1).
template <typename F>
void for_outer_inner(const Tensor& index, int64_t dim, const F& fn) {
  const Shape& s = index.sizes();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= s[d];
  for (size_t d = static_cast<size_t>(dim) + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  const int64_t per_task = std::min(inner, kInnerBlock) * s[dim];
  parallel_for(outer * blocks, std::max<int64_t>(1, kGrain / std::max<int64_t>(per_task, 1)),
               [&](int64_t t0, int64_t t1) {
                 for (int64_t t = t0; t < t1; ++t) {
                   const int64_t k0 = (t % blocks) * kInnerBlock;
                   fn(t / blocks, k0, std::min(inner, k0 + kInnerBlock));
                 }
               });
}

bool is_half_dtype(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

}  // namespace

void CpuBackend::index_select_rows(const Tensor& table, const Tensor& index, const Tensor& out) {
  const int64_t n = index.numel();
  if (n == 0 || out.numel() == 0) return;
  const int64_t row_bytes = (table.dim() > 1 ? table.numel() / table.size(0) : 1) *
                            static_cast<int64_t>(table.element_size());
  const char* src = static_cast<const char*>(table.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  const int64_t* idx = index.data_ptr<int64_t>();
  parallel_for(n, std::max<int64_t>(1, kGrain * 4 / std::max<int64_t>(row_bytes, 1)),
               [&](int64_t i0, int64_t i1) {
                 for (int64_t i = i0; i < i1; ++i) {
                   std::memcpy(dst + i * row_bytes, src + idx[i] * row_bytes,
                               static_cast<size_t>(row_bytes));
                 }
               });
}

void CpuBackend::index_add_rows(const Tensor& grad_out, const Tensor& index,
                                const Tensor& grad_table) {
  const int64_t n = index.numel();
  if (n == 0 || grad_table.numel() == 0) return;
  if (is_half_dtype(grad_table.dtype())) {
    // Sum in float32 and round once: rounding after every addition loses a bit per repeated
    // index.
    F32Args f{*this, {}};
    index_add_rows(f.in(grad_out), index, f.out(grad_table, /*read_too=*/true));
    f.finish();
    return;
  }
  const int64_t width = grad_table.dim() > 1 ? grad_table.numel() / grad_table.size(0) : 1;
  const int64_t* idx = index.data_ptr<int64_t>();
  dispatch_dtype(grad_table.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(grad_out.raw_data());
    T* table = static_cast<T*>(grad_table.raw_data());
    // Threads own disjoint column ranges and walk every row: no write conflicts.
    parallel_for(width, std::max<int64_t>(1, kGrain / n), [&](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < n; ++i) {
        T* dst = table + idx[i] * width;
        const T* src = g + i * width;
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
#pragma omp simd
          for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
        } else {
          for (int64_t c = c0; c < c1; ++c) add_to(dst[c], src[c]);
        }
      }
    });
  });
}

void CpuBackend::gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  if (out.numel() == 0) return;
  const Shape& is = index.sizes();
  const std::vector<int64_t> x_inner = inner_offsets(is, x.strides(), dim);
  const int64_t idim = is[dim], inner = static_cast<int64_t>(x_inner.size());
  const int64_t xs = x.stride(dim);
  const int64_t* idx = index.data_ptr<int64_t>();
  dispatch_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x.raw_data());
    T* op = static_cast<T*>(out.raw_data());
    for_outer_inner(index, dim, [&](int64_t o, int64_t k0, int64_t k1) {
      const int64_t xo = outer_offset(is, x.strides(), dim, o);
      for (int64_t j = 0; j < idim; ++j) {
        const int64_t base = (o * idim + j) * inner;
        for (int64_t k = k0; k < k1; ++k) op[base + k] = xp[xo + idx[base + k] * xs + x_inner[k]];
      }
    });
  });
}

void CpuBackend::scatter_add(const Tensor& out, int64_t dim, const Tensor& index,
                             const Tensor& src) {
  if (index.numel() == 0) return;
  if (is_half_dtype(out.dtype())) {  // float32 sums, rounded once (as in index_add_rows)
    F32Args f{*this, {}};
    scatter_add(f.out(out, /*read_too=*/true), dim, index, f.in(src));
    f.finish();
    return;
  }
  const Shape& is = index.sizes();
  const std::vector<int64_t> out_inner = inner_offsets(is, out.strides(), dim);
  const std::vector<int64_t> src_inner = inner_offsets(is, src.strides(), dim);
  const int64_t idim = is[dim], inner = static_cast<int64_t>(out_inner.size());
  const int64_t os = out.stride(dim), ss = src.stride(dim);
  const int64_t* idx = index.data_ptr<int64_t>();
  dispatch_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* op = static_cast<T*>(out.raw_data());
    const T* sp = static_cast<const T*>(src.raw_data());
    // Different (o, k) address different output elements whatever the index holds.
    for_outer_inner(index, dim, [&](int64_t o, int64_t k0, int64_t k1) {
      const int64_t oo = outer_offset(is, out.strides(), dim, o);
      const int64_t so = outer_offset(is, src.strides(), dim, o);
      for (int64_t j = 0; j < idim; ++j) {
        const int64_t base = (o * idim + j) * inner;
        for (int64_t k = k0; k < k1; ++k) {
          add_to(op[oo + idx[base + k] * os + out_inner[k]], sp[so + j * ss + src_inner[k]]);
        }
      }
    });
  });
}

}  // namespace gradus::backend::cpu
