// conv2d forward, backward-data and backward-weight on the CPU.
//
// One register-blocked micro-kernel does all the arithmetic (no im2col, no BLAS):
//
//   C[i][o] (+)= sum_j  base[rowoff[i] + loopoff[j]] * B[j][o]      i < R rows, o < V vectors
//
// The scalar operand is broadcast straight out of a (zero-padded) input image through two offset
// tables, so any stride / dilation / padding costs nothing extra and no column matrix is built;
// the vector operand B is contiguous along output channels (weights packed [K][O], or the
// transposed upstream gradient [P][O]). The result comes out position-major ([P][O]) and is
// transposed into NCHW by 8x8 blocks.
//   forward:          rows = output positions q, loop = (c, kh, kw),  B = weights^T
//   backward-weight:  rows = (c, kh, kw),        loop = positions q,  B = grad_out^T
//   backward-data:    stride 1 -> the forward of grad_out with flipped, transposed weights;
//                     otherwise column tiles (rows = q, loop = o, B = weights) + col2im.
// Work is split over images (and over position/row chunks when the batch is smaller than the
// thread count); each thread owns its scratch buffers, kept between calls (thread_local).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "backend/cpu/cpu_backend.h"

namespace gradus::backend::cpu {
namespace {

// ---------------------------------------------------------------------------------------- SIMD
template <typename T>
struct Vec;
#if defined(__AVX512F__)
constexpr int kMaxAcc = 24;  // of 32 zmm registers
constexpr int kMaxVecs = 4;  // vectors of output channels per block
template <>
struct Vec<float> {
  static constexpr int W = 16;
  using R = __m512;
  static R zero() { return _mm512_setzero_ps(); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static R set1(float v) { return _mm512_set1_ps(v); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(float* p, R v) { _mm512_storeu_ps(p, v); }
};
template <>
struct Vec<double> {
  static constexpr int W = 8;
  using R = __m512d;
  static R zero() { return _mm512_setzero_pd(); }
  static R load(const double* p) { return _mm512_loadu_pd(p); }
  static R set1(double v) { return _mm512_set1_pd(v); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_pd(a, b, c); }
  static void store(double* p, R v) { _mm512_storeu_pd(p, v); }
};
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kMaxAcc = 12;  // of 16 ymm registers
constexpr int kMaxVecs = 2;
template <>
struct Vec<float> {
  static constexpr int W = 8;
  using R = __m256;
  static R zero() { return _mm256_setzero_ps(); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static R set1(float v) { return _mm256_set1_ps(v); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* p, R v) { _mm256_storeu_ps(p, v); }
};
template <>
struct Vec<double> {
  static constexpr int W = 4;
  using R = __m256d;
  static R zero() { return _mm256_setzero_pd(); }
  static R load(const double* p) { return _mm256_loadu_pd(p); }
  static R set1(double v) { return _mm256_set1_pd(v); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_pd(a, b, c); }
  static void store(double* p, R v) { _mm256_storeu_pd(p, v); }
};
#else
constexpr int kMaxAcc = 8;  // portable scalar fallback; the compiler may still vectorise
constexpr int kMaxVecs = 4;
template <typename T>
struct Vec {
  static constexpr int W = 1;
  using R = T;
  static R zero() { return T(0); }
  static R load(const T* p) { return *p; }
  static R set1(T v) { return v; }
  static R fma(R a, R b, R c) { return a * b + c; }
  static void store(T* p, R v) { *p = v; }
};
#endif

// Rows per tile for V output-channel vectors: R * V accumulators fill the register file, but
// each row also needs a pointer register; past ~8 rows the compiler spills them (measured: V = 2
// with 7 rows is ~10% faster than with 12).
constexpr int rows_for(int v) {
  return std::min(v == 2 ? 7 : 8, std::max(1, kMaxAcc / v));
}

// C[i][0..V*W) (+)= sum_j base[rowoff[i] + loopoff[j]] * B[j][0..V*W) for i < nrows (<= R).
// Rows past nrows repeat the last valid row and are not stored. `init` (V*W values) seeds the
// accumulators when not accumulating (bias), otherwise they start at C (accumulate) or zero.
template <typename T, int R, int V>
void micro_kernel(const T* base, const int64_t* rowoff, int nrows, const int64_t* loopoff,
                  int64_t len, const T* B, int64_t ldb, T* C, int64_t ldc, const T* init,
                  bool accumulate) {
  using VT = Vec<T>;
  constexpr int W = VT::W;
  typename VT::R acc[R][V];
  const T* p[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    const int ii = i < nrows ? i : nrows - 1;
    p[i] = base + rowoff[ii];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      acc[i][v] = accumulate ? VT::load(C + ii * ldc + v * W)
                             : (init ? VT::load(init + v * W) : VT::zero());
    }
  }
  for (int64_t j = 0; j < len; ++j) {
    const int64_t off = loopoff[j];
    const T* b = B + j * ldb;
    typename VT::R bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = VT::load(b + v * W);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const typename VT::R a = VT::set1(p[i][off]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[i][v] = VT::fma(a, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    if (i < nrows) {
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) VT::store(C + i * ldc + v * W, acc[i][v]);
    }
  }
}

// Unit tiles need 28 accumulators + 3 registers: AVX-512's 32 registers only.
constexpr bool kUnitTiles = kMaxAcc >= 24;

// micro_kernel for R consecutive output positions of one row at unit stride: row i reads
// base + i + loopoff[j], so one pointer serves all rows (no spills at R = 14).
template <typename T, int R, int V>
void micro_kernel_unit(const T* p0, const int64_t* loopoff, int64_t len, const T* B, int64_t ldb,
                       T* C, int64_t ldc, const T* init, bool accumulate) {
  using VT = Vec<T>;
  constexpr int W = VT::W;
  typename VT::R acc[R][V];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      acc[i][v] =
          accumulate ? VT::load(C + i * ldc + v * W) : (init ? VT::load(init + v * W) : VT::zero());
    }
  }
  for (int64_t j = 0; j < len; ++j) {
    const T* p = p0 + loopoff[j];
    const T* b = B + j * ldb;
    typename VT::R bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = VT::load(b + v * W);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const typename VT::R a = VT::set1(p[i]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[i][v] = VT::fma(a, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) VT::store(C + i * ldc + v * W, acc[i][v]);
  }
}

// Runs the micro-kernel over rows [r0, r1) for output-channel vectors [0, nvec) of B/C, in
// blocks of up to kMaxVecs vectors. rowoff is indexed by row; C row r lives at C + (r - r0) * ldc.
template <typename T, int V>
void run_block(const T* base, const int64_t* rowoff, int64_t r0, int64_t r1, const int64_t* loopoff,
               int64_t len, const T* B, int64_t ldb, T* C, int64_t ldc, const T* init,
               bool accumulate) {
  constexpr int R = rows_for(V);
  for (int64_t r = r0; r < r1; r += R) {
    const int n = static_cast<int>(std::min<int64_t>(R, r1 - r));
    micro_kernel<T, R, V>(base, rowoff + r, n, loopoff, len, B, ldb, C + (r - r0) * ldc, ldc, init,
                          accumulate);
  }
}

template <typename T, int R, int V>
void run_unit(const T* base, const int64_t* rowoff, int64_t r0, int64_t r1, const int64_t* loopoff,
              int64_t len, const T* B, int64_t ldb, T* C, int64_t ldc, const T* init,
              bool accumulate) {
  for (int64_t r = r0; r < r1; r += R)
    micro_kernel_unit<T, R, V>(base + rowoff[r], loopoff, len, B, ldb, C + (r - r0) * ldc, ldc,
                               init, accumulate);
}

// Rows [r0, r1) are whole output rows of `unit_row` (a multiple of 7) positions at unit stride.
template <typename T>
void run_tiles_unit(const T* base, const int64_t* rowoff, int64_t r0, int64_t r1,
                    const int64_t* loopoff, int64_t len, const T* B, int64_t ldb, int64_t nvec,
                    T* C, int64_t ldc, const T* init, bool accumulate, int64_t unit_row) {
  constexpr int W = Vec<T>::W;
  for (int64_t v0 = 0; v0 < nvec; v0 += 2) {
    const T* Bv = B + v0 * W;
    T* Cv = C + v0 * W;
    const T* iv = init ? init + v0 * W : nullptr;
    const bool two = nvec - v0 >= 2, r14 = unit_row % 14 == 0;
    if (two && r14)
      run_unit<T, 14, 2>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv, accumulate);
    else if (two)
      run_unit<T, 7, 2>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv, accumulate);
    else if (r14)
      run_unit<T, 14, 1>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv, accumulate);
    else
      run_unit<T, 7, 1>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv, accumulate);
  }
}

template <typename T>
void run_tiles(const T* base, const int64_t* rowoff, int64_t r0, int64_t r1, const int64_t* loopoff,
               int64_t len, const T* B, int64_t ldb, int64_t nvec, T* C, int64_t ldc, const T* init,
               bool accumulate) {
  constexpr int W = Vec<T>::W;
  for (int64_t v0 = 0; v0 < nvec; v0 += kMaxVecs) {
    const int64_t nv = std::min<int64_t>(kMaxVecs, nvec - v0);
    const T* Bv = B + v0 * W;
    T* Cv = C + v0 * W;
    const T* iv = init ? init + v0 * W : nullptr;
    switch (nv) {
      case 1:
        run_block<T, 1>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv, accumulate);
        break;
      case 2:
        run_block<T, 2>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv, accumulate);
        break;
      case 3:
        run_block<T, 3>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv, accumulate);
        break;
      default:
        run_block<T, kMaxVecs>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv,
                               accumulate);
        break;
    }
  }
}

#if defined(__AVX512F__)
// GCC 12's AVX-512 shuffle intrinsics trip -Wmaybe-uninitialized on their own internal
// _mm512_undefined_ps() (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// One 16x16 float block: dst[c * ldd + r] = src[r * lds + c], r, c < 16.
inline void transpose16x16(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  const auto lo = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  const auto hi = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  for (int i = 0; i < 16; i += 4) {
    r[i] = lo(t[i], t[i + 2]);
    r[i + 1] = hi(t[i], t[i + 2]);
    r[i + 2] = lo(t[i + 1], t[i + 3]);
    r[i + 3] = hi(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xdd);
    }
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ldd, r[i]);
}
#pragma GCC diagnostic pop
#endif

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols (16x16 / 8x8 vector blocks for
// float, scalar 8-row strips otherwise).
template <typename T>
void transpose(const T* src, int64_t rows, int64_t cols, int64_t lds, T* dst, int64_t ldd) {
  int64_t r = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    for (; r + 16 <= rows; r += 16) {
      int64_t c = 0;
      for (; c + 16 <= cols; c += 16)
        transpose16x16(src + r * lds + c, lds, dst + c * ldd + r, ldd);
      for (; c < cols; ++c)
        for (int i = 0; i < 16; ++i) dst[c * ldd + r + i] = src[(r + i) * lds + c];
    }
  }
#endif
  for (; r + 8 <= rows; r += 8) {
    int64_t c = 0;
#if defined(__AVX2__)
    if constexpr (std::is_same_v<T, float>) {
      for (; c + 8 <= cols; c += 8) {
        __m256 m[8], t[8];
        for (int i = 0; i < 8; ++i) m[i] = _mm256_loadu_ps(src + (r + i) * lds + c);
        t[0] = _mm256_unpacklo_ps(m[0], m[1]);
        t[1] = _mm256_unpackhi_ps(m[0], m[1]);
        t[2] = _mm256_unpacklo_ps(m[2], m[3]);
        t[3] = _mm256_unpackhi_ps(m[2], m[3]);
        t[4] = _mm256_unpacklo_ps(m[4], m[5]);
        t[5] = _mm256_unpackhi_ps(m[4], m[5]);
        t[6] = _mm256_unpacklo_ps(m[6], m[7]);
        t[7] = _mm256_unpackhi_ps(m[6], m[7]);
        m[0] = _mm256_shuffle_ps(t[0], t[2], 0x44);
        m[1] = _mm256_shuffle_ps(t[0], t[2], 0xEE);
        m[2] = _mm256_shuffle_ps(t[1], t[3], 0x44);
        m[3] = _mm256_shuffle_ps(t[1], t[3], 0xEE);
        m[4] = _mm256_shuffle_ps(t[4], t[6], 0x44);
        m[5] = _mm256_shuffle_ps(t[4], t[6], 0xEE);
        m[6] = _mm256_shuffle_ps(t[5], t[7], 0x44);
        m[7] = _mm256_shuffle_ps(t[5], t[7], 0xEE);
        for (int i = 0; i < 4; ++i) {
          _mm256_storeu_ps(dst + (c + i) * ldd + r, _mm256_permute2f128_ps(m[i], m[i + 4], 0x20));
          _mm256_storeu_ps(dst + (c + i + 4) * ldd + r,
                           _mm256_permute2f128_ps(m[i], m[i + 4], 0x31));
        }
      }
    }
#endif
    for (; c < cols; ++c) {
      for (int i = 0; i < 8; ++i) dst[c * ldd + r + i] = src[(r + i) * lds + c];
    }
  }
  for (; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * ldd + r] = src[r * lds + c];
  }
}

template <typename T>
T* scratch(std::vector<T>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// Scratch that persists between calls (no page faults from fresh allocations), zero filled.
template <typename T>
T* zeroed_scratch(std::vector<T>& buf, size_t n) {
  T* p = scratch(buf, n);
  std::fill(p, p + n, T(0));
  return p;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

constexpr int64_t kChunkBytes = 28 * 1024;

// ---------------------------------------------------------------------------------- geometry
struct Geom {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, G;
  int64_t Cg() const { return C / G; }
  int64_t Og() const { return O / G; }
  int64_t K() const { return Cg() * KH * KW; }  // reduction length per group
  int64_t P() const { return OH * OW; }
  int64_t Hp() const { return H + 2 * ph; }
  int64_t Wp() const { return W + 2 * pw; }
  int64_t plane() const { return Hp() * Wp(); }
  bool padded() const { return ph != 0 || pw != 0; }
};

Geom make_geom(const Tensor& x, const Tensor& w, const Tensor& out, const Conv2dArgs& a) {
  return {x.size(0), x.size(1),    x.size(2),    x.size(3),  w.size(0),  w.size(2),
          w.size(3), out.size(2),  out.size(3),  a.stride_h, a.stride_w, a.pad_h,
          a.pad_w,   a.dilation_h, a.dilation_w, a.groups};
}

// koff[(c, kh, kw)]: offset of a kernel tap inside the padded image of one group.
std::vector<int64_t> kernel_offsets(const Geom& g) {
  std::vector<int64_t> off(static_cast<size_t>(g.K()));
  size_t k = 0;
  for (int64_t c = 0; c < g.Cg(); ++c)
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw)
        off[k++] = c * g.plane() + kh * g.dh * g.Wp() + kw * g.dw;
  return off;
}

// qoff[(oh, ow)]: offset of an output position's window origin inside the padded image.
std::vector<int64_t> position_offsets(const Geom& g) {
  std::vector<int64_t> off(static_cast<size_t>(g.P()));
  size_t q = 0;
  for (int64_t oh = 0; oh < g.OH; ++oh)
    for (int64_t ow = 0; ow < g.OW; ++ow) off[q++] = oh * g.sh * g.Wp() + ow * g.sw;
  return off;
}

// dst[0..n) = src[0..n) for the short rows of feature maps: fixed-size (inlined, vector) moves,
// the last one overlapping, instead of a memcpy call or a loop per row.
template <typename T>
inline void copy_short_row(T* dst, const T* src, int64_t n) {
  constexpr int64_t v = 64 / sizeof(T);  // elements per 64-byte move
  if (n >= v) {
    int64_t i = 0;
    for (; i + v <= n; i += v) std::memcpy(dst + i, src + i, 64);
    if (i < n) std::memcpy(dst + n - v, src + n - v, 64);
  } else if (n >= v / 2) {
    std::memcpy(dst, src, 32);
    std::memcpy(dst + n - v / 2, src + n - v / 2, 32);
  } else if (n >= v / 4) {
    std::memcpy(dst, src, 16);
    std::memcpy(dst + n - v / 4, src + n - v / 4, 16);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

// Copies image x [C, H, W] into buf [C, Hp, Wp] with a zero border; returns the image to read.
template <typename T>
const T* padded_image(const T* x, const Geom& g, std::vector<T>& buf) {
  if (!g.padded()) return x;
  const int64_t Wp = g.Wp(), Hp = g.Hp();
  T* dst = scratch(buf, static_cast<size_t>(g.C * g.plane()));
  for (int64_t c = 0; c < g.C; ++c) {
    T* pc = dst + c * g.plane();
    std::fill(pc, pc + g.ph * Wp, T(0));                    // top rows
    std::fill(pc + (g.H + g.ph) * Wp, pc + Hp * Wp, T(0));  // bottom rows
    for (int64_t h = 0; h < g.H; ++h) {
      T* row = pc + (h + g.ph) * Wp;
      for (int64_t w = 0; w < g.pw; ++w) row[w] = T(0);
      copy_short_row(row + g.pw, x + (c * g.H + h) * g.W, g.W);
      for (int64_t w = g.pw + g.W; w < Wp; ++w) row[w] = T(0);
    }
  }
  return dst;
}

// Splits n_items images over the threads; with fewer images than threads each image is cut
// into `parts` chunks of its row range.
struct Split {
  int64_t parts, items;
};
Split split_work(int64_t n_images, int threads) {
  const int64_t parts = n_images >= threads ? 1 : ceil_div(threads, std::max<int64_t>(1, n_images));
  return {parts, n_images * parts};
}

// Positions per forward chunk (see conv_forward).
constexpr int64_t kPositionChunk = 48;

// Prefetches (for writing) columns [c0, c1) of `rows` rows of a row-major [rows][ld] matrix.
template <typename T>
void prefetch_for_write(T* m, int64_t rows, int64_t ld, int64_t c0, int64_t c1) {
  if (c0 >= c1) return;
  for (int64_t r = 0; r < rows; ++r) {
    const char* p = reinterpret_cast<const char*>(m + r * ld + c0);
    const char* end = reinterpret_cast<const char*>(m + r * ld + c1);
    for (; p < end; p += 64) __builtin_prefetch(p, 1, 3);
    __builtin_prefetch(end - 1, 1, 3);
  }
}

// Prefetches (into L2) slice `part` of `parts` of [p, p + n): the next image's input is pulled in
// piecewise while the current one is computed, instead of stalling the padding/transposing.
template <typename T>
void prefetch_slice(const T* p, int64_t n, int64_t part, int64_t parts) {
  const int64_t per = ceil_div(n, parts);
  const char* b = reinterpret_cast<const char*>(p + std::min(n, part * per));
  const char* e = reinterpret_cast<const char*>(p + std::min(n, (part + 1) * per));
  for (; b < e; b += 64) __builtin_prefetch(b, 0, 2);
}

// Reduction chunk: whole kernel windows (multiples of taps) whose B rows (row_bytes each) fit in
// about half of L1, so they are reused from L1 by every tile.
// Chunks are balanced (288 taps in 3 x 96, not 90 + 90 + 90 + 18).
int64_t kchunk_for(int64_t K, int64_t taps, int64_t row_bytes) {
  const int64_t rows = std::max<int64_t>(taps, kChunkBytes / row_bytes / taps * taps);
  const int64_t chunks = ceil_div(K, rows);
  return std::min(K, ceil_div(ceil_div(K, chunks), taps) * taps);
}

// ------------------------------------------------------------------------------------ forward
template <typename T>
void conv_forward(const T* x, const T* w, const T* bias, T* out, const Geom& g) {
  constexpr int64_t W = Vec<T>::W;
  const int64_t Cg = g.Cg(), Og = g.Og(), K = g.K(), P = g.P();
  const int64_t nvec = ceil_div(Og, W), Opad = nvec * W;
  // Packed weights per group: [K][Opad] (output channels contiguous, zero padded); bias [Opad].
  static thread_local std::vector<T> wpk_buf, bpk_buf;
  // (Padded channels must be zero; without any, every element is written below.)
  T* wpk = Og < Opad ? zeroed_scratch(wpk_buf, static_cast<size_t>(g.G * K * Opad))
                     : scratch(wpk_buf, static_cast<size_t>(g.G * K * Opad));
  T* bpk = zeroed_scratch(bpk_buf, static_cast<size_t>(g.G * Opad));
  for (int64_t gi = 0; gi < g.G; ++gi)
    for (int64_t o = 0; o < Og; ++o) {
      for (int64_t k = 0; k < K; ++k) wpk[(gi * K + k) * Opad + o] = w[(gi * Og + o) * K + k];
      if (bias) bpk[gi * Opad + o] = bias[gi * Og + o];
    }
  const std::vector<int64_t> koff = kernel_offsets(g), qoff = position_offsets(g);
  const int threads = omp_get_max_threads();
  const Split split = split_work(g.N, threads);
  const int64_t chunk = ceil_div(P, split.parts);
  const int64_t kchunk = kchunk_for(K, g.KH * g.KW, Opad * static_cast<int64_t>(sizeof(T)));

#pragma omp parallel num_threads(threads)
  {
    static thread_local std::vector<T> pad_buf, tmp_buf;
    T* tmp = scratch(tmp_buf, static_cast<size_t>(std::min(chunk, P) * Opad));
    int64_t last_n = -1;
    const T* img = nullptr;
#pragma omp for schedule(static)
    for (int64_t item = 0; item < split.items; ++item) {
      const int64_t n = item / split.parts, q0 = (item % split.parts) * chunk;
      const int64_t q1 = std::min(P, q0 + chunk);
      if (q0 >= q1) continue;
      if (n != last_n) img = padded_image(x + n * g.C * g.H * g.W, g, pad_buf), last_n = n;
      for (int64_t gi = 0; gi < g.G; ++gi) {
        T* og = out + (n * g.O + gi * Og) * P;
        // Position chunks: each is finished (all reduction chunks, then transposed into NCHW)
        // before the next, and the next chunk's output lines are requested for writing up
        // front, so their fetches overlap the arithmetic instead of stalling the stores.
        const bool unit =
            kUnitTiles && g.sw == 1 && g.OW % 7 == 0 && q0 % g.OW == 0 && q1 % g.OW == 0;
        const int64_t pchunk =
            unit ? std::max<int64_t>(1, kPositionChunk / g.OW) * g.OW : kPositionChunk;
        for (int64_t qa = q0; qa < q1; qa += pchunk) {
          const int64_t qb = std::min(q1, qa + pchunk);
          if (split.parts == 1 && n + 1 < g.N && gi + 1 == g.G) {
            const int64_t chw = g.C * g.H * g.W;
            prefetch_slice(x + (n + 1) * chw, chw, (qa - q0) / pchunk, ceil_div(q1 - q0, pchunk));
          }
          if (qa == q0) prefetch_for_write(og, Og, P, qa, qb);
          prefetch_for_write(og, Og, P, qb, std::min(q1, qb + pchunk));
          // Reduction in chunks whose packed weights stay in L1 across the position tiles.
          for (int64_t k0 = 0; k0 < K; k0 += kchunk) {
            if (unit)
              run_tiles_unit<T>(img + gi * Cg * g.plane(), qoff.data(), qa, qb, koff.data() + k0,
                                std::min(kchunk, K - k0), wpk + (gi * K + k0) * Opad, Opad, nvec,
                                tmp + (qa - q0) * Opad, Opad,
                                bias && k0 == 0 ? bpk + gi * Opad : nullptr, k0 > 0, g.OW);
            else
              run_tiles<T>(img + gi * Cg * g.plane(), qoff.data(), qa, qb, koff.data() + k0,
                           std::min(kchunk, K - k0), wpk + (gi * K + k0) * Opad, Opad, nvec,
                           tmp + (qa - q0) * Opad, Opad,
                           bias && k0 == 0 ? bpk + gi * Opad : nullptr, k0 > 0);
          }
          transpose(tmp + (qa - q0) * Opad, qb - qa, Og, Opad, og + qa, P);
        }
      }
    }
  }
}

// ----------------------------------------------------------------------------- backward weight
// grad_w^T[k][o] = sum_n sum_q x_pad[koff[k] + qoff[q]] * grad_out^T[q][o]; grad_out is transposed
// per image ([O][P] -> [P][Opad]), and the bias gradient is summed from that transposed copy
// while it is hot (no second pass over grad_out).
template <typename T>
void conv_backward_weight(const T* gy, const T* x, T* gw, T* gb, const Geom& g) {
  constexpr int64_t W = Vec<T>::W;
  const int64_t Cg = g.Cg(), Og = g.Og(), K = g.K(), P = g.P();
  const int64_t nvec = ceil_div(Og, W), Opad = nvec * W;
  const std::vector<int64_t> koff = kernel_offsets(g), qoff = position_offsets(g);
  const int threads = omp_get_max_threads();
  const Split split = split_work(g.N, threads);
  const int64_t chunk = ceil_div(K, split.parts);
  // Per-thread partial sums of grad_w^T [threads][G][K][Opad] and of the bias [threads][G][Opad]
  // (double), reduced at the end.
  const int64_t part_size = g.G * K * Opad, bias_size = g.G * Opad;
  static thread_local std::vector<T> partial_buf;
  static thread_local std::vector<double> bias_buf;
  T* partial = scratch(partial_buf, static_cast<size_t>(threads * part_size));
  double* bias_part = scratch(bias_buf, static_cast<size_t>(threads * bias_size));

#pragma omp parallel num_threads(threads)
  {
    static thread_local std::vector<T> pad_buf, gyt_buf, bsum_buf;
    T* part = partial + omp_get_thread_num() * part_size;
    std::fill(part, part + part_size, T(0));
    double* bpart = bias_part + omp_get_thread_num() * bias_size;
    std::fill(bpart, bpart + bias_size, 0.0);
    // Columns past Og are never written and must read as zero.
    T* gyt = Og < Opad ? zeroed_scratch(gyt_buf, static_cast<size_t>(P * Opad))
                       : scratch(gyt_buf, static_cast<size_t>(P * Opad));
    T* bsum = scratch(bsum_buf, static_cast<size_t>(Opad));
#pragma omp for schedule(static)
    for (int64_t item = 0; item < split.items; ++item) {
      const int64_t n = item / split.parts, k0 = (item % split.parts) * chunk;
      const int64_t k1 = std::min(K, k0 + chunk);
      if (k0 >= k1) continue;
      const T* img = padded_image(x + n * g.C * g.H * g.W, g, pad_buf);
      for (int64_t gi = 0; gi < g.G; ++gi) {
        transpose(gy + (n * g.O + gi * Og) * P, Og, P, P, gyt, Opad);  // [Og][P] -> [P][Opad]
        if (gb && k0 == 0) {  // one chunk per image adds its bias gradient
          std::fill(bsum, bsum + Opad, T(0));
          for (int64_t q = 0; q < P; ++q) {
            const T* row = gyt + q * Opad;
#pragma omp simd
            for (int64_t o = 0; o < Opad; ++o) bsum[o] += row[o];
          }
          for (int64_t o = 0; o < Og; ++o) bpart[gi * Opad + o] += static_cast<double>(bsum[o]);
        }
        // In pieces, prefetching the next image's grad_out and x in between.
        // (Pieces are whole tiles: a split tile would run the loop over positions twice.)
        const int64_t pieces = split.parts == 1 && n + 1 < g.N ? 8 : 1;
        const int64_t rows = rows_for(static_cast<int>(std::min<int64_t>(kMaxVecs, nvec)));
        const int64_t step = ceil_div(ceil_div(k1 - k0, pieces), rows) * rows;
        for (int64_t i = 0; i < pieces; ++i) {
          const int64_t ka = k0 + i * step, kb = std::min(k1, ka + step);
          if (pieces > 1 && gi + 1 == g.G) {
            prefetch_slice(gy + (n + 1) * g.O * P, g.O * P, i, pieces);
            prefetch_slice(x + (n + 1) * g.C * g.H * g.W, g.C * g.H * g.W, i, pieces);
          }
          if (ka < kb) {
            run_tiles<T>(img + gi * Cg * g.plane(), koff.data(), ka, kb, qoff.data(), P, gyt, Opad,
                         nvec, part + (gi * K + ka) * Opad, Opad, nullptr, true);
          }
        }
      }
    }
    // grad_w[g*Og + o][k] = sum over threads of partial[t][g][k][o]; likewise the bias. (The
    // team may be smaller than `threads`, e.g. when called inside another parallel region.)
    const int team = omp_get_num_threads();
#pragma omp for schedule(static)
    for (int64_t go = 0; go < g.O; ++go) {
      const int64_t gi = go / Og, o = go % Og;
      T* dst = gw + go * K;
      for (int64_t k = 0; k < K; ++k) {
        T s = 0;
        for (int t = 0; t < team; ++t) s += partial[t * part_size + (gi * K + k) * Opad + o];
        dst[k] = s;
      }
      if (gb) {
        double b = 0;
        for (int t = 0; t < team; ++t) b += bias_part[t * bias_size + gi * Opad + o];
        gb[go] = static_cast<T>(b);
      }
    }
  }
}

// Backward weight for small reductions (a first layer: K = C * KH * KW of a few dozen) over long
// planes: transposing grad_out would cost more than the arithmetic, so instead each image's
// columns X [K (+1 row of ones for the bias)][P] are built (cheap when K is small) and
// grad_w[o][k] = sum_q grad_out[o][q] * X[k][q] is taken as dot products vectorised along q, kept
// as per-lane partial sums across images and reduced once at the end.
template <typename T>
bool backward_weight_by_dots(const Geom& g, int threads) {
  return g.K() <= 32 && g.P() >= 8 * Vec<T>::W && g.N >= threads;
}

constexpr int kDotRows = 4, kDotCols = 5;  // 20 accumulators + 4 grad_out vectors

// part[i][j][lane] += sum over vectors v of A[i][v] * B[j][v] (lanes kept apart). Rows past
// na / nb repeat the last valid one and are not stored.
template <typename T>
void dot_tile(const T* A, int64_t lda, int na, const T* B, int64_t ldb, int nb, int64_t nvec,
              T* part, int64_t ld_part) {
  using VT = Vec<T>;
  constexpr int W = VT::W;
  typename VT::R acc[kDotRows][kDotCols];
  const T* a[kDotRows];
  const T* b[kDotCols];
  for (int i = 0; i < kDotRows; ++i) a[i] = A + std::min(i, na - 1) * lda;
  for (int j = 0; j < kDotCols; ++j) b[j] = B + std::min(j, nb - 1) * ldb;
#pragma GCC unroll 8
  for (int i = 0; i < kDotRows; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < kDotCols; ++j) acc[i][j] = VT::zero();
  for (int64_t v = 0; v < nvec; ++v) {
    typename VT::R av[kDotRows];
#pragma GCC unroll 8
    for (int i = 0; i < kDotRows; ++i) av[i] = VT::load(a[i] + v * W);
#pragma GCC unroll 8
    for (int j = 0; j < kDotCols; ++j) {
      const typename VT::R bv = VT::load(b[j] + v * W);
#pragma GCC unroll 8
      for (int i = 0; i < kDotRows; ++i) acc[i][j] = VT::fma(av[i], bv, acc[i][j]);
    }
  }
  for (int i = 0; i < na; ++i)
    for (int j = 0; j < nb; ++j) {
      T* p = part + (i * ld_part + j) * W;
      VT::store(p, VT::fma(acc[i][j], VT::set1(T(1)), VT::load(p)));
    }
}

template <typename T>
void conv_backward_weight_dots(const T* gy, const T* x, T* gw, T* gb, const Geom& g) {
  constexpr int64_t W = Vec<T>::W;
  const int64_t Cg = g.Cg(), Og = g.Og(), K = g.K(), P = g.P();
  const int64_t Kb = K + (gb ? 1 : 0);  // a row of ones yields the bias gradient
  const int64_t nvec = P / W;           // full vectors; the rest is added lane by lane
  const std::vector<int64_t> koff = kernel_offsets(g), qoff = position_offsets(g);
  const int threads = omp_get_max_threads();
  const int64_t part_size = g.O * Kb * W;  // [O][Kb][W] lane partials per thread
  static thread_local std::vector<T> partial_buf;
  T* partial = scratch(partial_buf, static_cast<size_t>(threads * part_size));

#pragma omp parallel num_threads(threads)
  {
    static thread_local std::vector<T> pad_buf, col_buf;
    T* part = partial + omp_get_thread_num() * part_size;
    std::fill(part, part + part_size, T(0));
    T* col = scratch(col_buf, static_cast<size_t>(Kb * P));
    if (gb) std::fill(col + K * P, col + Kb * P, T(1));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.N; ++n) {
      const T* img = padded_image(x + n * g.C * g.H * g.W, g, pad_buf);
      for (int64_t gi = 0; gi < g.G; ++gi) {
        const T* ig = img + gi * Cg * g.plane();
        for (int64_t k = 0; k < K; ++k) {  // columns (im2col) of this group, row by row
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            const T* src = ig + koff[k] + qoff[oh * g.OW];
            T* dst = col + k * P + oh * g.OW;
            if (g.sw == 1) {
              copy_short_row(dst, src, g.OW);
            } else {
              for (int64_t ow = 0; ow < g.OW; ++ow) dst[ow] = src[ow * g.sw];
            }
          }
        }
        const T* gyg = gy + (n * g.O + gi * Og) * P;
        T* pg = part + gi * Og * Kb * W;
        const int64_t tiles = ceil_div(Og, kDotRows);
        for (int64_t o0 = 0; o0 < Og; o0 += kDotRows) {
          const int na = static_cast<int>(std::min<int64_t>(kDotRows, Og - o0));
          if (n + 1 < g.N) {  // pull the next image's grad_out and input in meanwhile
            prefetch_slice(gy + (n + 1) * g.O * P + gi * Og * P, Og * P, o0 / kDotRows, tiles);
            if (gi == 0) {
              prefetch_slice(x + (n + 1) * g.C * g.H * g.W, g.C * g.H * g.W, o0 / kDotRows, tiles);
            }
          }
          for (int64_t k0 = 0; k0 < Kb; k0 += kDotCols) {
            const int nb = static_cast<int>(std::min<int64_t>(kDotCols, Kb - k0));
            dot_tile(gyg + o0 * P, P, na, col + k0 * P, P, nb, nvec, pg + (o0 * Kb + k0) * W, Kb);
            for (int64_t q = nvec * W; q < P; ++q)  // the last partial vector, lane 0
              for (int i = 0; i < na; ++i)
                for (int j = 0; j < nb; ++j)
                  pg[((o0 + i) * Kb + k0 + j) * W] += gyg[(o0 + i) * P + q] * col[(k0 + j) * P + q];
          }
        }
      }
    }
    const int team = omp_get_num_threads();
#pragma omp for schedule(static)
    for (int64_t o = 0; o < g.O; ++o) {
      for (int64_t k = 0; k < Kb; ++k) {
        double s = 0;
        for (int t = 0; t < team; ++t)
          for (int64_t l = 0; l < W; ++l)
            s += static_cast<double>(partial[t * part_size + (o * Kb + k) * W + l]);
        if (k < K)
          gw[o * K + k] = static_cast<T>(s);
        else
          gb[o] = static_cast<T>(s);
      }
    }
  }
}

// ------------------------------------------------------------------------------- backward data
// Stride 1 with pad <= dilation * (k - 1): grad_x is the forward convolution of grad_out with the
// flipped, transposed weights and padding dilation * (k - 1) - pad.
// That forward vectorises over the input channels per group; with only a few of them (a first
// layer on 1-3 channels) most vector lanes would idle, and the column path, which vectorises over
// Cg * KH * KW, wins despite its scatter (weighted 1/2 for it).
template <typename T>
bool backward_data_as_forward(const Geom& g) {
  if (g.sh != 1 || g.sw != 1 || g.ph > g.dh * (g.KH - 1) || g.pw > g.dw * (g.KW - 1)) return false;
  constexpr int64_t W = Vec<T>::W;
  const double lanes_flip =
      static_cast<double>(g.Cg()) / static_cast<double>(ceil_div(g.Cg(), W) * W);
  const double lanes_col = static_cast<double>(g.K()) / static_cast<double>(ceil_div(g.K(), W) * W);
  return lanes_flip >= 0.5 * lanes_col;
}

template <typename T>
void conv_backward_data_flipped(const T* gy, const T* w, T* gx, const Geom& g) {
  const int64_t Cg = g.Cg(), Og = g.Og(), KH = g.KH, KW = g.KW;
  static thread_local std::vector<T> wf_buf;
  T* wf = scratch(wf_buf, static_cast<size_t>(g.C * Og * KH * KW));  // [C][Og][KH][KW]
  for (int64_t gi = 0; gi < g.G; ++gi)
    for (int64_t o = 0; o < Og; ++o)
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw)
            wf[(((gi * Cg + c) * Og + o) * KH + kh) * KW + kw] =
                w[(((gi * Og + o) * Cg + c) * KH + (KH - 1 - kh)) * KW + (KW - 1 - kw)];
  const Geom t{g.N,
               g.O,
               g.OH,
               g.OW,
               g.C,
               KH,
               KW,
               g.H,
               g.W,
               1,
               1,
               g.dh * (KH - 1) - g.ph,
               g.dw * (KW - 1) - g.pw,
               g.dh,
               g.dw,
               g.G};
  conv_forward(gy, static_cast<const T*>(wf), static_cast<const T*>(nullptr), gx, t);
}

// General case: per image, column tiles colT[q][(c, kh, kw)] = sum_o grad_out[o][q] * w[o][k]
// scattered back into a padded grad_x (col2im).
template <typename T>
void conv_backward_data_col2im(const T* gy, const T* w, T* gx, const Geom& g) {
  constexpr int64_t W = Vec<T>::W;
  const int64_t Cg = g.Cg(), Og = g.Og(), K = g.K(), P = g.P();
  const int64_t nvec = ceil_div(K, W), Kpad = nvec * W;
  std::vector<T> wpk(static_cast<size_t>(g.G * Og * Kpad), T(0));  // [G][Og][Kpad]
  for (int64_t go = 0; go < g.O; ++go)
    std::copy(w + go * K, w + (go + 1) * K, wpk.begin() + go * Kpad);
  const std::vector<int64_t> koff = kernel_offsets(g), qoff = position_offsets(g);
  std::vector<int64_t> qid(static_cast<size_t>(P)), ooff(static_cast<size_t>(Og));
  for (int64_t q = 0; q < P; ++q) qid[q] = q;
  for (int64_t o = 0; o < Og; ++o) ooff[o] = o * P;
  const int64_t qchunk = std::min<int64_t>(P, 256);

#pragma omp parallel
  {
    static thread_local std::vector<T> gxp_buf, col_buf;
    T* gxp = scratch(gxp_buf, static_cast<size_t>(g.C * g.plane()));
    T* col = scratch(col_buf, static_cast<size_t>(qchunk * Kpad));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.N; ++n) {
      std::fill(gxp, gxp + g.C * g.plane(), T(0));
      for (int64_t gi = 0; gi < g.G; ++gi) {
        T* gxg = gxp + gi * Cg * g.plane();
        for (int64_t q0 = 0; q0 < P; q0 += qchunk) {
          const int64_t q1 = std::min(P, q0 + qchunk);
          run_tiles<T>(gy + (n * g.O + gi * Og) * P, qid.data(), q0, q1, ooff.data(), Og,
                       wpk.data() + gi * Og * Kpad, Kpad, nvec, col, Kpad, nullptr, false);
          for (int64_t q = q0; q < q1; ++q) {
            T* dst = gxg + qoff[q];
            const T* src = col + (q - q0) * Kpad;
            for (int64_t k = 0; k < K; ++k) dst[koff[k]] += src[k];
          }
        }
      }
      T* out = gx + n * g.C * g.H * g.W;
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t h = 0; h < g.H; ++h)
          std::memcpy(out + (c * g.H + h) * g.W, gxp + c * g.plane() + (h + g.ph) * g.Wp() + g.pw,
                      sizeof(T) * static_cast<size_t>(g.W));
    }
  }
}

// Half-precision tensors are computed in float32 copies, rounded once when copied back.
struct F32Args {
  CpuBackend& be;
  std::vector<std::pair<Tensor, Tensor>> back;  // (float32 copy, original output)
  static bool native(const Tensor& t) {
    return !t.defined() || t.dtype() == DType::f32 || t.dtype() == DType::f64;
  }
  Tensor in(const Tensor& t) {
    if (native(t)) return t;
    Tensor f = empty(t.sizes(), {DType::f32, t.device()});
    be.copy(t, f);
    return f;
  }
  Tensor out(const Tensor& t) {
    if (native(t)) return t;
    Tensor f = empty(t.sizes(), {DType::f32, t.device()});
    back.emplace_back(f, t);
    return f;
  }
  void finish() {
    for (auto& [f, t] : back) be.copy(f, t);
  }
};

template <typename Fn>
void dispatch_f(DType t, Fn&& fn) {
  if (t == DType::f64)
    fn(double{});
  else
    fn(float{});
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

}  // namespace

// ------------------------------------------------------------------------------------ launchers
void CpuBackend::conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out,
                        const Conv2dArgs& args) {
  const Geom g = make_geom(x, w, out, args);
  if (out.numel() == 0) return;
  F32Args f{*this, {}};
  const Tensor xf = f.in(x), wf = f.in(w), bf = f.in(bias), of = f.out(out);
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = of.data_ptr<T>();
    const T* b = ptr_or_null<T>(bf);
    if (g.K() == 0) {  // no input channels: the output is the bias
      for (int64_t i = 0; i < out.numel(); ++i) o[i] = b ? b[(i / g.P()) % g.O] : T(0);
      return;
    }
    conv_forward(xf.data_ptr<T>(), wf.data_ptr<T>(), b, o, g);
  });
  f.finish();
}

void CpuBackend::conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Tensor& grad_x,
                                      const Conv2dArgs& args) {
  const Geom g = make_geom(grad_x, w, grad_out, args);
  if (grad_x.numel() == 0) return;
  F32Args f{*this, {}};
  const Tensor gf = f.in(grad_out), wf = f.in(w), of = f.out(grad_x);
  dispatch_f(of.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* gx = of.data_ptr<T>();
    if (g.P() == 0 || g.Og() == 0) {
      std::fill(gx, gx + grad_x.numel(), T(0));
    } else if (backward_data_as_forward<T>(g)) {
      conv_backward_data_flipped(gf.data_ptr<T>(), wf.data_ptr<T>(), gx, g);
    } else {
      conv_backward_data_col2im(gf.data_ptr<T>(), wf.data_ptr<T>(), gx, g);
    }
  });
  f.finish();
}

void CpuBackend::conv2d_backward_weight(const Tensor& grad_out, const Tensor& x,
                                        const Tensor& grad_w, const Tensor& grad_bias,
                                        const Conv2dArgs& args) {
  const Geom g = make_geom(x, grad_w, grad_out, args);
  F32Args f{*this, {}};
  const Tensor gf = f.in(grad_out), xf = f.in(x), gwf = f.out(grad_w), gbf = f.out(grad_bias);
  dispatch_f(gwf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* gw = gwf.data_ptr<T>();
    T* gb = gbf.defined() ? gbf.data_ptr<T>() : nullptr;
    if (g.N * g.P() == 0 || grad_w.numel() == 0) {  // empty sums
      std::fill(gw, gw + grad_w.numel(), T(0));
      for (int64_t o = 0; gb && o < g.O; ++o) {  // the bias gradient may still be non-empty
        double s = 0;
        for (int64_t n = 0; n < g.N; ++n)
          for (int64_t q = 0; q < g.P(); ++q)
            s += static_cast<double>(gf.data_ptr<T>()[(n * g.O + o) * g.P() + q]);
        gb[o] = static_cast<T>(s);
      }
      return;
    }
    if (backward_weight_by_dots<T>(g, omp_get_max_threads())) {
      conv_backward_weight_dots(gf.data_ptr<T>(), xf.data_ptr<T>(), gw, gb, g);
    } else {
      conv_backward_weight(gf.data_ptr<T>(), xf.data_ptr<T>(), gw, gb, g);
    }
  });
  f.finish();
}

}  // namespace gradus::backend::cpu
