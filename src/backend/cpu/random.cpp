// Random kernels on the shared Philox4x32-10 stream (see gradus/core/random.h).
//
// Element i of the flattened (row-major) output uses block g = i / 4, i.e.
// philox4x32(counter = offset + g, key = seed), and word i % 4 of it. Results therefore do not
// depend on the thread count or on how the work is split, and the CUDA twin can reproduce them.
// The per-element formulas (the CUDA kernels must use the same ones, with FMA contraction only
// where written):
//  - uniform, float out:  u = uint_to_unit_float(w); v = fmaf(u, (float)(hi - lo), (float)lo);
//                         if (v >= (float)hi && (float)hi > (float)lo) v = nextafterf(hi, lo)
//                         (f16/bf16 round this float once).
//  - uniform, f64 out:    u = w * 2^-32 (double); v = fma(u, hi - lo, lo), clamped likewise.
//  - uniform, integer out: r = hi - lo; v = lo + w % r when r <= 2^32. Wider ranges take two
//                         words per element: element i uses block i / 2, words 2 (i % 2) (low)
//                         and 2 (i % 2) + 1 (high), v = lo + ((high << 32) | low) % r; such a
//                         draw consumes ceil(n / 2) blocks instead of ceil(n / 4).
//  - normal: per block, u1 = 1 - unit(w0) in (0, 1], u2 = unit(w1), rad = sqrt(-2 log(u1)),
//            (n1, n0) = rad * sincos_turns(u2) (sin, cos of 2 pi u2); words (w2, w3) give
//            n2, n3 the same way. All float, with gradus/core/random_math.h's log / sincos
//            (correctly rounded steps and explicit FMAs, so the CUDA kernel runs the very same
//            code and every CPU gets the same bits). out = fmaf(n, std, mean)
//            (f64 out: fma((double)n, std, mean)).
//  - bernoulli: out = (double)unit(w) < (double)p.
//  - dropout: keep = unit(w) >= (float)p; mask = keep; out = keep ? x * (float)(1 / (1 - p)) : 0
//            (f64 x: the scale in double).
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/loops.h"
#include "gradus/core/random_math.h"

namespace gradus::backend::cpu {
namespace {

// Values generated per step inside a run (a stack buffer, L1-resident).
constexpr int64_t kRandChunk = 1024;

inline uint32_t word_at(PhiloxState st, int64_t i) {
  return philox4x32(st.offset + static_cast<uint64_t>(i) / 4, st.seed)[static_cast<size_t>(i & 3)];
}

// Splits stream elements [first, first + n) into a scalar head up to a block boundary, whole
// Philox blocks, and a scalar tail: block(k, g0, count) handles `count` blocks starting at block
// g0, whose words go to buffer positions k, k + 1, ...; one(k, i) handles the single element i.
template <typename Block, typename One>
void for_blocks(int64_t first, int64_t n, const Block& block, const One& one) {
  int64_t k = 0;
  while (k < n && ((first + k) & 3) != 0) {
    one(k, first + k);
    ++k;
  }
  const int64_t blocks = (n - k) / 4;
  const int64_t g0 = (first + k) / 4;
  block(k, g0, blocks);
  for (k += blocks * 4; k < n; ++k) one(k, first + k);
}

// out[4g .. 4g+3] = the unit floats / raw words of block base + g. Plain functions (not
// lambdas) so GCC vectorises the loops across blocks.
__attribute__((noinline)) void unit_blocks(float* __restrict out, int64_t blocks, uint64_t base,
                                           uint64_t key) {
#pragma omp simd
  for (int64_t g = 0; g < blocks; ++g) {
    const auto w = philox4x32(base + static_cast<uint64_t>(g), key);
    out[4 * g] = uint_to_unit_float(w[0]);
    out[4 * g + 1] = uint_to_unit_float(w[1]);
    out[4 * g + 2] = uint_to_unit_float(w[2]);
    out[4 * g + 3] = uint_to_unit_float(w[3]);
  }
}
__attribute__((noinline)) void word_blocks(uint32_t* __restrict out, int64_t blocks, uint64_t base,
                                           uint64_t key) {
#pragma omp simd
  for (int64_t g = 0; g < blocks; ++g) {
    const auto w = philox4x32(base + static_cast<uint64_t>(g), key);
    out[4 * g] = w[0];
    out[4 * g + 1] = w[1];
    out[4 * g + 2] = w[2];
    out[4 * g + 3] = w[3];
  }
}

// w[k] = word(first + k).
void raw_words(PhiloxState st, int64_t first, int64_t n, uint32_t* w) {
  for_blocks(
      first, n,
      [&](int64_t k, int64_t g0, int64_t blocks) {
        word_blocks(w + k, blocks, st.offset + static_cast<uint64_t>(g0), st.seed);
      },
      [&](int64_t k, int64_t i) { w[k] = word_at(st, i); });
}

// The two Box-Muller normals of one word pair.
inline void box_muller(uint32_t w0, uint32_t w1, float& n0, float& n1) {
  const float u1 = 1.0f - uint_to_unit_float(w0);
  const float u2 = uint_to_unit_float(w1);
  // random_math.h's log and sincos, not vec_math.h's: their multiply-adds are std::fma, fused
  // on every CPU as on the GPU, where vec::fmadd is a plain multiply and add in the baseline
  // (no FMA) copy of this backend.
  const float rad = std::sqrt(-2.0f * rmath::log(u1));
  float s, c;
  rmath::sincos_turns(u2, s, c);
  n0 = rad * c;
  n1 = rad * s;
}

// out[4g .. 4g+3] = the normals of block base + g. A plain function (not a lambda) so GCC
// vectorises the loop across blocks.
__attribute__((noinline)) void normal_blocks(float* __restrict out, int64_t blocks, uint64_t base,
                                             uint64_t key) {
#pragma omp simd
  for (int64_t g = 0; g < blocks; ++g) {
    const auto w = philox4x32(base + static_cast<uint64_t>(g), key);
    float n0, n1, n2, n3;
    box_muller(w[0], w[1], n0, n1);
    box_muller(w[2], w[3], n2, n3);
    out[4 * g] = n0;
    out[4 * g + 1] = n1;
    out[4 * g + 2] = n2;
    out[4 * g + 3] = n3;
  }
}

// z[k] = the standard normal of stream element first + k.
void normal_floats(PhiloxState st, int64_t first, int64_t n, float* z) {
  for_blocks(
      first, n,
      [&](int64_t k, int64_t g0, int64_t blocks) {
        normal_blocks(z + k, blocks, st.offset + static_cast<uint64_t>(g0), st.seed);
      },
      [&](int64_t k, int64_t i) {
        const auto w = philox4x32(st.offset + static_cast<uint64_t>(i) / 4, st.seed);
        const size_t pair = static_cast<size_t>(i & 2);
        float n0, n1;
        box_muller(w[pair], w[pair + 1], n0, n1);
        z[k] = (i & 1) ? n1 : n0;
      });
}

// Runs fn(buffer-sized pieces) over every element of the operands (out first), with the flat
// index of each piece: fn(char* const* ptrs, const int64_t* strides, int64_t n, int64_t first).
template <int N, typename F>
void for_each_piece(const std::array<const Tensor*, N>& ts, const F& fn) {
  for_each_run<N>(ts, [&](char* const* p, const int64_t* s, int64_t n, int64_t first) {
    for (int64_t off = 0; off < n; off += kRandChunk) {
      std::array<char*, N> q;
      for (int k = 0; k < N; ++k) q[k] = p[k] + off * s[k];
      fn(q.data(), s, std::min(kRandChunk, n - off), first + off);
    }
  });
}

}  // namespace

void unit_floats(PhiloxState st, int64_t first, int64_t n, float* u) {
  for_blocks(
      first, n,
      [&](int64_t k, int64_t g0, int64_t blocks) {
        unit_blocks(u + k, blocks, st.offset + static_cast<uint64_t>(g0), st.seed);
      },
      [&](int64_t k, int64_t i) { u[k] = uint_to_unit_float(word_at(st, i)); });
}

void CpuBackend::uniform(const Tensor& out, PhiloxState state, double lo, double hi) {
  if (out.numel() == 0) return;
  const DType dt = out.dtype();
  if (dt == DType::f64) {
    for_each_piece<1>({&out}, [&](char* const* p, const int64_t* s, int64_t n, int64_t first) {
      uint32_t w[kRandChunk];
      double v[kRandChunk];
      raw_words(state, first, n, w);
      for (int64_t i = 0; i < n; ++i) {
        const double x = std::fma(static_cast<double>(w[i]) * 0x1p-32, hi - lo, lo);
        v[i] = x >= hi && hi > lo ? std::nextafter(hi, lo) : x;
      }
      store_run<double>(v, p[0], s[0], dt, n);
    });
    return;
  }
  if (is_floating(dt)) {
    const float lo_f = static_cast<float>(lo), hi_f = static_cast<float>(hi);
    const float range = static_cast<float>(hi - lo);
    const float below_hi = std::nextafter(hi_f, lo_f);
    for_each_piece<1>({&out}, [&](char* const* p, const int64_t* s, int64_t n, int64_t first) {
      alignas(64) float u[kRandChunk];
      unit_floats(state, first, n, u);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const float v = std::fma(u[i], range, lo_f);  // exactly, on every CPU
        u[i] = v >= hi_f && hi_f > lo_f ? below_hi : v;
      }
      store_run<float>(u, p[0], s[0], dt, n);
    });
    return;
  }
  // Integers in [lo, hi).
  const int64_t lo_i = static_cast<int64_t>(lo);
  const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo_i);
  const bool wide = range > (uint64_t{1} << 32);
  for_each_piece<1>({&out}, [&](char* const* p, const int64_t* s, int64_t n, int64_t first) {
    int64_t v[kRandChunk];
    if (wide) {
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t e = static_cast<uint64_t>(first + i);
        const auto w = philox4x32(state.offset + e / 2, state.seed);
        const size_t j = static_cast<size_t>(e & 1) * 2;
        const uint64_t x = (static_cast<uint64_t>(w[j + 1]) << 32) | w[j];
        v[i] = lo_i + static_cast<int64_t>(x % range);
      }
    } else {
      uint32_t w[kRandChunk];
      raw_words(state, first, n, w);
      for (int64_t i = 0; i < n; ++i) v[i] = lo_i + static_cast<int64_t>(w[i] % range);
    }
    store_run<int64_t>(v, p[0], s[0], dt, n);
  });
}

void CpuBackend::normal(const Tensor& out, PhiloxState state, double mean, double std) {
  if (out.numel() == 0) return;
  const DType dt = out.dtype();
  const float mean_f = static_cast<float>(mean), std_f = static_cast<float>(std);
  for_each_piece<1>({&out}, [&](char* const* p, const int64_t* s, int64_t n, int64_t first) {
    alignas(64) float z[kRandChunk];
    normal_floats(state, first, n, z);
    if (dt == DType::f64) {
      double v[kRandChunk];
      for (int64_t i = 0; i < n; ++i) v[i] = std::fma(static_cast<double>(z[i]), std, mean);
      store_run<double>(v, p[0], s[0], dt, n);
    } else {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) z[i] = std::fma(z[i], std_f, mean_f);  // on every CPU
      store_run<float>(z, p[0], s[0], dt, n);
    }
  });
}

void CpuBackend::bernoulli(const Tensor& out, const Tensor& p, PhiloxState state) {
  if (out.numel() == 0) return;
  for_each_piece<2>({&out, &p}, [&](char* const* ptr, const int64_t* s, int64_t n, int64_t first) {
    alignas(64) float u[kRandChunk];
    double prob[kRandChunk];
    bool hit[kRandChunk];
    unit_floats(state, first, n, u);
    load_run<double>(ptr[1], s[1], p.dtype(), prob, n);
    for (int64_t i = 0; i < n; ++i) hit[i] = static_cast<double>(u[i]) < prob[i];
    store_run<bool>(hit, ptr[0], s[0], out.dtype(), n);
  });
}

void CpuBackend::dropout(const Tensor& x, double p, PhiloxState state, const Tensor& out,
                         const Tensor& mask) {
  if (out.numel() == 0) return;
  const float p_f = static_cast<float>(p);
  auto run = [&](auto ctag) {
    using C = decltype(ctag);  // float, or double for f64 inputs
    const C scale = static_cast<C>(1.0 / (1.0 - p));
    for_each_piece<3>(
        {&out, &x, &mask}, [&](char* const* ptr, const int64_t* s, int64_t n, int64_t first) {
          alignas(64) float u[kRandChunk];
          alignas(64) C v[kRandChunk];
          uint8_t keep[kRandChunk];
          unit_floats(state, first, n, u);
          load_run<C>(ptr[1], s[1], x.dtype(), v, n);
#pragma omp simd
          for (int64_t i = 0; i < n; ++i) {
            const bool k = u[i] >= p_f;
            keep[i] = k;
            v[i] = k ? v[i] * scale : C(0);  // a select, so p = 1 gives 0 rather than 0 * inf
          }
          store_run<C>(v, ptr[0], s[0], out.dtype(), n);
          store_run<uint8_t>(keep, ptr[2], s[2], mask.dtype(), n);
        });
  };
  if (x.dtype() == DType::f64) {
    run(double{});
  } else {
    run(float{});
  }
}

}  // namespace gradus::backend::cpu
