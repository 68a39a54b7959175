// Memory movement: strided copy with casting, host transfers, fill and arange.
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/loops.h"

namespace gradus::backend::cpu {
namespace {

// Bytes per thread below which a memcpy is not split.
constexpr int64_t kCopyGrainBytes = int64_t{1} << 18;

void parallel_memcpy(void* dst, const void* src, int64_t nbytes) {
  parallel_for(nbytes, kCopyGrainBytes, [&](int64_t begin, int64_t end) {
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin,
                static_cast<size_t>(end - begin));
  });
}

// Same dtype, arbitrary strides: moves elements as opaque words of `sizeof(W)` bytes.
template <typename W>
void copy_words(const Tensor& src, const Tensor& dst) {
  for_each_run<2>({&dst, &src}, [](char* const* p, const int64_t* s, int64_t n, int64_t) {
    if (s[0] == static_cast<int64_t>(sizeof(W)) && s[1] == static_cast<int64_t>(sizeof(W))) {
      std::memmove(p[0], p[1], static_cast<size_t>(n) * sizeof(W));
    } else if (s[1] == 0) {  // broadcast source
      W v;
      std::memcpy(&v, p[1], sizeof(W));
      for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], &v, sizeof(W));
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], sizeof(W));
    }
  });
}

// Same dtype where the destination is contiguous along its last axis and the source along the
// second-to-last (a transpose, e.g. contiguous() of x.t()): copied in square tiles so reads and
// writes both stay in cache. Returns false for other layouts.
template <typename W>
bool copy_transposed(const Tensor& src, const Tensor& dst) {
  constexpr int64_t kTile = 32;
  constexpr int64_t es = sizeof(W);
  const StridedLayout<2> layout = make_layout<2>(dst.sizes(), {&dst, &src});
  const int64_t nd = static_cast<int64_t>(layout.sizes.size());
  if (nd < 2) return false;
  const auto& inner = layout.strides[nd - 1];
  const auto& outer = layout.strides[nd - 2];
  if (inner[0] != es || outer[1] != es || inner[1] == es) return false;
  const int64_t rows = layout.sizes[nd - 2], cols = layout.sizes[nd - 1];
  if (rows < kTile || cols < kTile) return false;
  const int64_t batch = layout.numel / (rows * cols);
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  char* dbase = static_cast<char*>(dst.raw_data());
  const char* sbase = static_cast<const char*>(src.raw_data());
  const int64_t dstride = outer[0], sstride = inner[1];
  parallel_for(batch * row_tiles, std::max<int64_t>(1, kGrain / (kTile * cols)),
               [&](int64_t t0, int64_t t1) {
                 for (int64_t t = t0; t < t1; ++t) {
                   int64_t b = t / row_tiles, doff = 0, soff = 0;
                   for (int64_t d = nd - 3; d >= 0; --d) {  // batch offsets
                     const int64_t i = b % layout.sizes[d];
                     b /= layout.sizes[d];
                     doff += i * layout.strides[d][0];
                     soff += i * layout.strides[d][1];
                   }
                   const int64_t r0 = (t % row_tiles) * kTile, r1 = std::min(rows, r0 + kTile);
                   for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
                     const int64_t c1 = std::min(cols, c0 + kTile);
                     for (int64_t r = r0; r < r1; ++r) {
                       W* d = reinterpret_cast<W*>(dbase + doff + r * dstride);
                       const char* sp = sbase + soff + r * es;
                       for (int64_t c = c0; c < c1; ++c) {
                         d[c] = *reinterpret_cast<const W*>(sp + c * sstride);
                       }
                     }
                   }
                 }
               });
  return true;
}

// Different dtypes: one instantiation per (source, destination) pair.
template <typename S, typename D>
void copy_cast(const Tensor& src, const Tensor& dst) {
  for_each_run<2>({&dst, &src}, [](char* const* p, const int64_t* s, int64_t n, int64_t) {
    if (s[0] == static_cast<int64_t>(sizeof(D)) && s[1] == static_cast<int64_t>(sizeof(S))) {
      D* d = reinterpret_cast<D*>(p[0]);
      const S* x = reinterpret_cast<const S*>(p[1]);
      for (int64_t i = 0; i < n; ++i) d[i] = convert<D>(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        *reinterpret_cast<D*>(p[0] + i * s[0]) =
            convert<D>(*reinterpret_cast<const S*>(p[1] + i * s[1]));
      }
    }
  });
}

}  // namespace

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  if (src.dtype() == dst.dtype()) {
    const int64_t esize = static_cast<int64_t>(dst.element_size());
    if (src.is_contiguous() && dst.is_contiguous()) {
      if (src.raw_data() != dst.raw_data()) {
        parallel_memcpy(dst.raw_data(), src.raw_data(), dst.numel() * esize);
      }
      return;
    }
    switch (esize) {
      case 1:
        if (!copy_transposed<uint8_t>(src, dst)) copy_words<uint8_t>(src, dst);
        return;
      case 2:
        if (!copy_transposed<uint16_t>(src, dst)) copy_words<uint16_t>(src, dst);
        return;
      case 4:
        if (!copy_transposed<uint32_t>(src, dst)) copy_words<uint32_t>(src, dst);
        return;
      default:
        if (!copy_transposed<uint64_t>(src, dst)) copy_words<uint64_t>(src, dst);
        return;
    }
  }
  dispatch_dtype(src.dtype(), [&](auto s) {
    dispatch_dtype(dst.dtype(), [&](auto d) { copy_cast<decltype(s), decltype(d)>(src, dst); });
  });
}

void CpuBackend::copy_from_host(const void* host, const Tensor& dst_contiguous) {
  const int64_t nbytes =
      dst_contiguous.numel() * static_cast<int64_t>(dst_contiguous.element_size());
  if (nbytes > 0) parallel_memcpy(dst_contiguous.raw_data(), host, nbytes);
}

void CpuBackend::copy_to_host(const Tensor& src_contiguous, void* host) {
  const int64_t nbytes =
      src_contiguous.numel() * static_cast<int64_t>(src_contiguous.element_size());
  if (nbytes > 0) parallel_memcpy(host, src_contiguous.raw_data(), nbytes);
}

void CpuBackend::fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T v = convert<T>(value);
    for_each_run<1>({&dst}, [v](char* const* p, const int64_t* s, int64_t n, int64_t) {
      if (s[0] == static_cast<int64_t>(sizeof(T))) {
        T* d = reinterpret_cast<T*>(p[0]);
        for (int64_t i = 0; i < n; ++i) d[i] = v;
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = v;
      }
    });
  });
}

void CpuBackend::arange(const Tensor& dst, double start, double step) {
  if (dst.numel() == 0) return;
  dispatch_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(dst.raw_data());
    parallel_for(dst.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        // Two roundings, never an FMA (copy.cpp is compiled with -ffp-contract=off): the CUDA
        // kernel and both CPU copies give the same values.
        d[i] = convert<T>(start + static_cast<double>(i) * step);
      }
    });
  });
}

}  // namespace gradus::backend::cpu
