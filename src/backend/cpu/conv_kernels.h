// Register-blocked micro-kernels for conv.cpp (the CPU backend's convolutions), kept apart so
// conv.cpp reads as the algorithms: geometry, the forward / backward drivers and the launchers.
//
// NOT an ordinary header: conv.cpp includes it twice, inside two namespaces -- once under
// `#pragma GCC target("avx512...")` with GRADUS_CONVK_AVX512 = 1 (chosen at run time when the CPU
// has AVX-512), and once with the build's own flags -- so the hot loops get AVX-512 even though
// the project builds with -mno-avx512f on GCC 12 (see cmake/GradusHelpers.cmake). The C++
// preprocessor runs before `#pragma GCC target` takes effect, hence the explicit macro instead
// of the compiler's ISA macro. Each copy ends with `struct Kernels`, the interface conv.cpp's
// drivers use.
//
// The core is one micro-kernel:
//
//   C[i][o] (+)= sum_j  base[rowoff[i] + loopoff[j]] * B[j][o]      i < R rows, o < V vectors
//
// The scalar operand is broadcast straight out of a (zero-padded) input image through two offset
// tables, so stride / dilation / padding cost nothing and no column matrix is built; the vector
// operand B is contiguous along output channels. micro_kernel_unit is the variant for R
// consecutive positions of one output row (one pointer instead of R); dot_tile computes dot
// products along positions for the small-reduction weight gradient.
// Expects (from conv.cpp): <immintrin.h> on x86, <algorithm>, <cstdint>, <type_traits>, and
// GRADUS_CONVK_AVX512 defined to 0 or 1.

// ---------------------------------------------------------------------------------------- SIMD
template <typename T>
struct Vec;
#if GRADUS_CONVK_AVX512
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

#if GRADUS_CONVK_AVX512
// GCC 12's AVX-512 shuffle intrinsics trip -Wmaybe-uninitialized on their own internal
// _mm512_undefined_ps() (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// In-register 16x16 transpose: lane j of r[i] moves to lane i of r[j].
inline void transpose16_regs(__m512* r) {
  __m512 t[16];
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
}
#pragma GCC diagnostic pop

// One 16x16 float block: dst[c * ldd + r] = src[r * lds + c], r, c < 16.
inline void transpose16x16(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * lds);
  transpose16_regs(r);
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ldd, r[i]);
}
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
                       T* C, int64_t ldc, const T* init, bool accumulate, T* out, int64_t ld_out,
                       int64_t o_valid) {
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
  if (out) {  // final: out[o][i] (NCHW rows of ld_out) for o < o_valid, transposed here
#if GRADUS_CONVK_AVX512
    if constexpr (std::is_same_v<T, float>) {
      const __mmask16 mask = static_cast<__mmask16>((1u << R) - 1);
      for (int v = 0; v < V; ++v) {
        __m512 r[16];
        for (int i = 0; i < 16; ++i) r[i] = i < R ? acc[i][v] : _mm512_setzero_ps();
        transpose16_regs(r);
        const int64_t lanes = std::min<int64_t>(16, o_valid - v * 16);
        for (int64_t l = 0; l < lanes; ++l)
          _mm512_mask_storeu_ps(out + (v * 16 + l) * ld_out, mask, r[l]);
      }
      return;
    }
#endif
    T buf[R][V * W];
    for (int i = 0; i < R; ++i)
      for (int v = 0; v < V; ++v) VT::store(buf[i] + v * W, acc[i][v]);
    for (int64_t o = 0; o < std::min<int64_t>(o_valid, V * W); ++o)
      for (int i = 0; i < R; ++i) out[o * ld_out + i] = buf[i][o];
    return;
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
              bool accumulate, T* out, int64_t ld_out, int64_t o_valid) {
  for (int64_t r = r0; r < r1; r += R)
    micro_kernel_unit<T, R, V>(base + rowoff[r], loopoff, len, B, ldb, C + (r - r0) * ldc, ldc,
                               init, accumulate, out ? out + r : nullptr, ld_out, o_valid);
}

// Rows [r0, r1) are whole output rows of `unit_row` (a multiple of 7) positions at unit stride.
// With `out` (the NCHW output of this group, rows of ld_out), results go there transposed for
// output channels < o_valid instead of into C.
template <typename T>
void run_tiles_unit(const T* base, const int64_t* rowoff, int64_t r0, int64_t r1,
                    const int64_t* loopoff, int64_t len, const T* B, int64_t ldb, int64_t nvec,
                    T* C, int64_t ldc, const T* init, bool accumulate, int64_t unit_row, T* out,
                    int64_t ld_out, int64_t o_valid) {
  constexpr int W = Vec<T>::W;
  for (int64_t v0 = 0; v0 < nvec; v0 += 2) {
    const T* Bv = B + v0 * W;
    T* Cv = C + v0 * W;
    const T* iv = init ? init + v0 * W : nullptr;
    T* ov = out ? out + v0 * W * ld_out : nullptr;
    const int64_t ovalid = o_valid - v0 * W;
    const bool two = nvec - v0 >= 2, r14 = unit_row % 14 == 0;
    if (two && r14) {
      run_unit<T, 14, 2>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv, accumulate, ov,
                         ld_out, ovalid);
    } else if (two) {
      run_unit<T, 7, 2>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv, accumulate, ov,
                        ld_out, ovalid);
    } else if (r14) {
      run_unit<T, 14, 1>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv, accumulate, ov,
                         ld_out, ovalid);
    } else {
      run_unit<T, 7, 1>(base, rowoff, r0, r1, loopoff, len, Bv, ldb, Cv, ldc, iv, accumulate, ov,
                        ld_out, ovalid);
    }
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

// dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols (16x16 / 8x8 vector blocks for
// float, scalar 8-row strips otherwise).
template <typename T>
void transpose(const T* src, int64_t rows, int64_t cols, int64_t lds, T* dst, int64_t ldd) {
  int64_t r = 0;
#if GRADUS_CONVK_AVX512
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
#if GRADUS_CONVK_AVX512 || defined(__AVX2__)
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

inline int64_t ceil_div_k(int64_t a, int64_t b) {
  return (a + b - 1) / b;
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

// ------------------------------------------------------------------------------- interface
// What conv.cpp's drivers see of this copy of the kernels.
struct Kernels {
  template <typename T>
  static constexpr int64_t width = Vec<T>::W;  // output channels per vector
  static constexpr int64_t max_vecs = kMaxVecs;
  static constexpr bool unit_tiles = kUnitTiles;
  static constexpr int64_t dot_rows = kDotRows, dot_cols = kDotCols;
  static constexpr int64_t rows(int64_t v) { return rows_for(static_cast<int>(v)); }
  template <typename T, typename... A>
  static void tiles(A... a) {
    run_tiles<T>(a...);
  }
  template <typename T, typename... A>
  static void tiles_unit(A... a) {
    run_tiles_unit<T>(a...);
  }
  template <typename T, typename... A>
  static void transpose_block(A... a) {
    transpose<T>(a...);
  }
  template <typename T, typename... A>
  static void dots(A... a) {
    dot_tile<T>(a...);
  }
};
