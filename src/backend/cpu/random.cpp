// Random kernels on the shared Philox4x32-10 stream (see gradus/core/random.h).
//
// Element i of the flattened (row-major) output uses block g = i / 4, i.e.
// philox4x32(counter = offset + g, key = seed), and word i % 4 of it. Results therefore do not
// depend on the thread count or on how the work is split, and the CUDA twin can reproduce them
// exactly. The exact per-element formulas (the CUDA kernels must use the same ones):
//  - uniform, float out:  u = uint_to_unit_float(w); v = fmaf(u, (float)(hi - lo), (float)lo);
//                         if (v >= (float)hi && (float)hi > (float)lo) v = nextafterf(hi, lo)
//                         (f16/bf16 round this float once).
//  - uniform, f64 out:    u = w * 2^-32 (double); v = fma(u, hi - lo, lo), clamped likewise.
//  - uniform, integer out: r = hi - lo; v = lo + w % r when r <= 2^32. Wider ranges take two
//                         words per element: element i uses block i / 2, words 2 (i % 2) (low)
//                         and 2 (i % 2) + 1 (high), v = lo + ((high << 32) | low) % r; such a
//                         draw consumes ceil(n / 2) blocks instead of ceil(n / 4).
//  - normal:  per block, u1 = 1 - unit(w0) in (0, 1], u2 = unit(w1), rad = sqrtf(-2 log(u1)),
//             n0 = rad cos(2 pi u2), n1 = rad sin(2 pi u2); words (w2, w3) give n2, n3 the same
//             way, all float through rmath::box_muller (gradus/core/random_math.h: library
//             logf / sinf / cosf differ between glibc and CUDA in the last bit).
//             out = fmaf(n, std, mean) (f64 out: fma((double)n, std, mean)).
//  - bernoulli: out = (double)unit(w) < (double)p.
//  - dropout: keep = unit(w) >= (float)p; mask = keep; out = keep ? x * (float)(1 / (1 - p)) : 0.
#include <cmath>
#include <numbers>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/loops.h"
#include "gradus/core/random_math.h"

namespace gradus::backend::cpu {
namespace {

// Word i of the stream, caching the current block (callers walk indices in increasing order).
class WordStream {
 public:
  explicit WordStream(PhiloxState s) : state_(s) {}
  uint32_t operator()(int64_t i) {
    const uint64_t g = static_cast<uint64_t>(i) >> 2;
    if (g != block_) {
      words_ = philox4x32(state_.offset + g, state_.seed);
      block_ = g;
    }
    return words_[static_cast<size_t>(i & 3)];
  }
  // 64-bit value i of the two-words-per-element layout.
  uint64_t wide(int64_t i) {
    const auto w = philox4x32(state_.offset + (static_cast<uint64_t>(i) >> 1), state_.seed);
    const size_t j = static_cast<size_t>(i & 1) * 2;
    return (static_cast<uint64_t>(w[j + 1]) << 32) | w[j];
  }

 private:
  PhiloxState state_;
  uint64_t block_ = ~uint64_t{0};
  std::array<uint32_t, 4> words_{};
};

// The four normals of one block: Box-Muller on word pairs in float, with the bit-reproducible
// log / sin / cos of gradus/core/random_math.h (the CUDA backend calls the same function).
inline std::array<float, 4> normals_of(const std::array<uint32_t, 4>& w) {
  return rmath::box_muller(w);
}

// Fills `out` (any layout) with f(flat_index) of type T, in parallel.
template <typename T, typename F>
void generate(const Tensor& out, const F& f) {
  for_each_run<1>({&out}, [&](char* const* p, const int64_t* s, int64_t n, int64_t first) {
    auto g = f;  // each run gets its own stream cache
    for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = g(first + i);
  });
}

}  // namespace

void CpuBackend::uniform(const Tensor& out, PhiloxState state, double lo, double hi) {
  if (out.numel() == 0) return;
  const DType dt = out.dtype();
  if (dt == DType::f64) {
    return generate<double>(out, [ws = WordStream(state), lo, hi](int64_t i) mutable {
      const double u = static_cast<double>(ws(i)) * 0x1p-32;
      const double v = std::fma(u, hi - lo, lo);
      return v >= hi && hi > lo ? std::nextafter(hi, lo) : v;
    });
  }
  if (is_floating(dt)) {
    const float lo_f = static_cast<float>(lo), hi_f = static_cast<float>(hi);
    const float range = static_cast<float>(hi - lo);
    auto f = [ws = WordStream(state), lo_f, hi_f, range](int64_t i) mutable {
      const float v = std::fma(uint_to_unit_float(ws(i)), range, lo_f);
      return v >= hi_f && hi_f > lo_f ? std::nextafter(hi_f, lo_f) : v;
    };
    return dispatch_floating(dt, [&](auto tag) {
      using T = decltype(tag);
      generate<T>(out, [f](int64_t i) mutable { return convert<T>(f(i)); });
    });
  }
  // Integers in [lo, hi).
  const int64_t lo_i = static_cast<int64_t>(lo);
  const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo_i);
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T>) {
      if (range <= (uint64_t{1} << 32)) {
        generate<T>(out, [ws = WordStream(state), lo_i, range](int64_t i) mutable {
          return static_cast<T>(lo_i + static_cast<int64_t>(ws(i) % range));
        });
      } else {
        generate<T>(out, [ws = WordStream(state), lo_i, range](int64_t i) mutable {
          return static_cast<T>(lo_i + static_cast<int64_t>(ws.wide(i) % range));
        });
      }
    }
  });
}

void CpuBackend::normal(const Tensor& out, PhiloxState state, double mean, double std) {
  if (out.numel() == 0) return;
  const DType dt = out.dtype();
  // Stream cache of one block of normals.
  struct NormalStream {
    PhiloxState st;
    uint64_t block = ~uint64_t{0};
    std::array<float, 4> n{};
    float operator()(int64_t i) {
      const uint64_t g = static_cast<uint64_t>(i) >> 2;
      if (g != block) {
        n = normals_of(philox4x32(st.offset + g, st.seed));
        block = g;
      }
      return n[static_cast<size_t>(i & 3)];
    }
  };
  if (dt == DType::f64) {
    return generate<double>(out, [ns = NormalStream{state}, mean, std](int64_t i) mutable {
      return std::fma(static_cast<double>(ns(i)), std, mean);
    });
  }
  const float mean_f = static_cast<float>(mean), std_f = static_cast<float>(std);
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    generate<T>(out, [ns = NormalStream{state}, mean_f, std_f](int64_t i) mutable {
      return convert<T>(std::fma(ns(i), std_f, mean_f));
    });
  });
}

void CpuBackend::bernoulli(const Tensor& out, const Tensor& p, PhiloxState state) {
  if (out.numel() == 0) return;
  dispatch_dtype(out.dtype(), [&](auto otag) {
    using O = decltype(otag);
    dispatch_dtype(p.dtype(), [&](auto ptag) {
      using P = decltype(ptag);
      for_each_run<2>(
          {&out, &p}, [&](char* const* ptr, const int64_t* s, int64_t n, int64_t first) {
            WordStream ws(state);
            for (int64_t i = 0; i < n; ++i) {
              const double prob = convert<double>(*reinterpret_cast<const P*>(ptr[1] + i * s[1]));
              const bool hit = static_cast<double>(uint_to_unit_float(ws(first + i))) < prob;
              *reinterpret_cast<O*>(ptr[0] + i * s[0]) = convert<O>(hit);
            }
          });
    });
  });
}

void CpuBackend::dropout(const Tensor& x, double p, PhiloxState state, const Tensor& out,
                         const Tensor& mask) {
  if (out.numel() == 0) return;
  const float p_f = static_cast<float>(p);
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const int64_t msize = static_cast<int64_t>(mask.element_size());
  dispatch_floating(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const C sc = std::is_same_v<C, double> ? static_cast<C>(1.0 / (1.0 - p)) : C(scale);
    for_each_run<3>({&out, &x, &mask}, [&](char* const* ptr, const int64_t* s, int64_t n,
                                           int64_t first) {
      WordStream ws(state);
      for (int64_t i = 0; i < n; ++i) {
        const bool keep = uint_to_unit_float(ws(first + i)) >= p_f;
        const C v = convert<C>(*reinterpret_cast<const T*>(ptr[1] + i * s[1]));
        *reinterpret_cast<T*>(ptr[0] + i * s[0]) = convert<T>(keep ? v * sc : C(0));
        char* m = ptr[2] + i * s[2];
        if (msize == 1) {
          *reinterpret_cast<uint8_t*>(m) = keep ? 1 : 0;
        } else {
          store_run<int64_t>(std::array<int64_t, 1>{keep ? 1 : 0}.data(), m, s[2], mask.dtype(), 1);
        }
      }
    });
  });
}

}  // namespace gradus::backend::cpu
