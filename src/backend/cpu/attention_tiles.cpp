// The attention tiles' AVX-512 work (attention_tiles.h). The product is a register-blocked
// micro-kernel computing MR rows x NV vectors of 16 columns of C at a time, each step of the k loop
// loading NV vectors of a row of B and broadcasting MR elements of A (so A may be read in either
// orientation). Column counts that are not multiples of 16 mask the last vector.
#include "backend/cpu/attention_tiles.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "backend/cpu/avx512_dispatch.h"
#include "backend/cpu/avx512_math.h"

namespace gradus::backend::cpu::tile {

// GCC compiles the kernel for AVX-512 whatever the build's flags (the pragma), as conv.cpp does.
#if GRADUS_AVX512_KERNELS
GRADUS_AVX512_BEGIN
using avx512::exp16;
using avx512::first_lanes;
namespace {

// A's element (r, p) is a[r * row_step + p * col_step].
struct ReadA {
  const float* a;
  int64_t row_step, col_step;
};

// C[0..MR) x [0..16 NV) of the block at c (the last vector masked by tail).
template <int MR, int NV>
void block(int64_t k, float alpha, ReadA a, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc, __mmask16 tail) {
  // Fully unrolled (the pragmas), so that the accumulators live in registers, not on the stack.
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(bp + 16 * v);
    bv[NV - 1] = _mm512_maskz_loadu_ps(tail, bp + 16 * (NV - 1));
    const float* ap = a.a + p * a.col_step;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 x = _mm512_set1_ps(ap[r * a.row_step]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mask = v == NV - 1 ? tail : __mmask16(0xFFFF);
      float* cp = c + r * ldc + 16 * v;
      __m512 out = _mm512_mul_ps(acc[r][v], scale);
      if (beta != 0.0F) out = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, cp), out);
      _mm512_mask_storeu_ps(cp, mask, out);
    }
  }
}

// The last rows (fewer than a full block): block<rows, NV> for rows < R.
template <int NV, int R>
void rest(int64_t rows, int64_t k, float alpha, ReadA a, const float* b, int64_t ldb, float beta,
          float* c, int64_t ldc, __mmask16 tail) {
  if constexpr (R > 0) {
    if (rows == R) {
      block<R, NV>(k, alpha, a, b, ldb, beta, c, ldc, tail);
    } else {
      rest<NV, R - 1>(rows, k, alpha, a, b, ldb, beta, c, ldc, tail);
    }
  }
}

// Rows per block for NV vectors: 16 accumulators (8 rows of 2 vectors, 4 of 4), which divide the
// tiles' 32 and 64 rows evenly, leave registers for B's vectors and the broadcast, and keep the
// row pointers of a non-transposed A within the general-purpose registers.
template <int NV>
constexpr int rows_per_block() {
  return NV <= 2 ? 8 : 4;
}

// Every row of one column panel of at most 4 vectors.
template <int NV>
void panel(int64_t m, int64_t k, float alpha, ReadA a, const float* b, int64_t ldb, float beta,
           float* c, int64_t ldc, __mmask16 tail) {
  constexpr int MR = rows_per_block<NV>();
  int64_t r = 0;
  for (; r + MR <= m; r += MR) {
    const ReadA ar{a.a + r * a.row_step, a.row_step, a.col_step};
    block<MR, NV>(k, alpha, ar, b, ldb, beta, c + r * ldc, ldc, tail);
  }
  if (r < m) {
    const ReadA ar{a.a + r * a.row_step, a.row_step, a.col_step};
    rest<NV, MR - 1>(m - r, k, alpha, ar, b, ldb, beta, c + r * ldc, ldc, tail);
  }
}

}  // namespace

void gemm(bool a_transposed, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const ReadA ra = a_transposed ? ReadA{a, 1, lda} : ReadA{a, lda, 1};
  for (int64_t j = 0; j < n; j += 64) {
    const int64_t width = std::min<int64_t>(64, n - j);
    const int nv = static_cast<int>((width + 15) / 16);
    const int last = static_cast<int>(width - 16 * (nv - 1));  // 1..16 columns
    const auto tail = static_cast<__mmask16>((1U << last) - 1U);
    switch (nv) {
      case 1:
        panel<1>(m, k, alpha, ra, b + j, ldb, beta, c + j, ldc, tail);
        break;
      case 2:
        panel<2>(m, k, alpha, ra, b + j, ldb, beta, c + j, ldc, tail);
        break;
      case 3:
        panel<3>(m, k, alpha, ra, b + j, ldb, beta, c + j, ldc, tail);
        break;
      default:
        panel<4>(m, k, alpha, ra, b + j, ldb, beta, c + j, ldc, tail);
        break;
    }
  }
}

namespace {

// The 16 lanes reduced with op: halves folded with op8 (8 lanes), then op4 (4 lanes, scalar last).
template <typename Op8, typename Op4>
float reduce16(__m512 v, Op8 op8, Op4 op4) {
  const __m256 h = op8(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 q = op4(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = op4(q, _mm_movehl_ps(q, q));
  q = op4(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}
float max16(__m512 v) {
  return reduce16(
      v, [](__m256 a, __m256 b) { return _mm256_max_ps(a, b); },
      [](__m128 a, __m128 b) { return _mm_max_ps(a, b); });
}
float sum16(__m512 v) {
  return reduce16(
      v, [](__m256 a, __m256 b) { return _mm256_add_ps(a, b); },
      [](__m128 a, __m128 b) { return _mm_add_ps(a, b); });
}

}  // namespace

void transpose(const float* src, int64_t ld, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  if (ld > std::numeric_limits<int32_t>::max() / 16) {  // beyond the gather's 32-bit offsets
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t c = 0; c < cols; ++c) dst[c * ldd + t] = src[t * ld + c];
    }
    return;
  }
  // 16 rows of one column at a time: a gather (rows ld apart), one contiguous store.
  const __m512i lanes =
      _mm512_mullo_epi32(_mm512_set1_epi32(static_cast<int>(ld)),
                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  for (int64_t t = 0; t < rows; t += 16) {
    const __mmask16 in = first_lanes(rows - t);
    const float* base = src + t * ld;
    for (int64_t c = 0; c < cols; ++c) {
      const __m512 column =
          _mm512_mask_i32gather_ps(_mm512_setzero_ps(), in, lanes, base + c, sizeof(float));
      _mm512_mask_storeu_ps(dst + c * ldd + t, in, column);
    }
  }
}

void online_softmax(float* s, int64_t lds, int64_t rows, const Visible& vis, float* m, float* l,
                    float* acc, int64_t dv) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * lds;
    const int64_t n = vis(r);
    __m512 vmax = _mm512_set1_ps(m[r]);
    for (int64_t j = 0; j < n; j += 16) {
      const __mmask16 in = first_lanes(n - j);
      vmax = _mm512_mask_max_ps(vmax, in, vmax, _mm512_maskz_loadu_ps(in, sr + j));
    }
    const float mx = max16(vmax);
    if (n == 0 || mx == kNegInf) {
      for (int64_t j = 0; j < vis.cols; j += 16) {
        _mm512_mask_storeu_ps(sr + j, first_lanes(vis.cols - j), _mm512_setzero_ps());
      }
      continue;
    }
    const float rescale = std::exp(m[r] - mx);  // 0 on the first visible tile
    const __m512 shift = _mm512_set1_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < vis.cols; j += 16) {
      const __mmask16 all = first_lanes(vis.cols - j);
      const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(all, sr + j), shift);
      const __m512 e = _mm512_maskz_mov_ps(first_lanes(n - j), exp16(x));
      sum = _mm512_add_ps(sum, e);
      _mm512_mask_storeu_ps(sr + j, all, e);
    }
    l[r] = l[r] * rescale + sum16(sum);
    m[r] = mx;
    if (rescale != 1.0F) {
      float* ar = acc + r * dv;
      const __m512 f = _mm512_set1_ps(rescale);
      for (int64_t c = 0; c < dv; c += 16) {
        const __mmask16 in = first_lanes(dv - c);
        _mm512_mask_storeu_ps(ar + c, in, _mm512_mul_ps(_mm512_maskz_loadu_ps(in, ar + c), f));
      }
    }
  }
}

void softmax_backward(float* p, float* ds, int64_t ld, int64_t rows, const Visible& vis,
                      const float* lse, const float* delta) {
  for (int64_t r = 0; r < rows; ++r) {
    float* pr = p + r * ld;
    float* dr = ds + r * ld;
    const int64_t n = vis(r);
    const __m512 shift = _mm512_set1_ps(lse[r]);
    const __m512 d = _mm512_set1_ps(delta[r]);
    for (int64_t j = 0; j < vis.cols; j += 16) {
      const __mmask16 all = first_lanes(vis.cols - j);
      const __m512 e = _mm512_maskz_mov_ps(
          first_lanes(n - j), exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(all, pr + j), shift)));
      _mm512_mask_storeu_ps(pr + j, all, e);
      const __m512 g = _mm512_maskz_loadu_ps(all, dr + j);
      _mm512_mask_storeu_ps(dr + j, all, _mm512_mul_ps(e, _mm512_sub_ps(g, d)));
    }
  }
}

GRADUS_AVX512_END

bool avx512() {
  // Decided once: this is asked for every tile.
  static const bool on = cpu_has_avx512() && !isa_forced_base("GRADUS_ATTENTION_ISA");
  return on;
}

#else  // no AVX-512 copy in this build

bool avx512() {
  return false;
}

void gemm(bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
          float, float*, int64_t) {
  throw std::logic_error("tile::gemm called in a build without its AVX-512 kernels");
}

void transpose(const float*, int64_t, int64_t, int64_t, float*, int64_t) {
  throw std::logic_error("tile::transpose called in a build without its AVX-512 kernels");
}

void online_softmax(float*, int64_t, int64_t, const Visible&, float*, float*, float*, int64_t) {
  throw std::logic_error("tile::online_softmax called in a build without its AVX-512 kernels");
}

void softmax_backward(float*, float*, int64_t, int64_t, const Visible&, const float*,
                      const float*) {
  throw std::logic_error("tile::softmax_backward called in a build without its AVX-512 kernels");
}

#endif

}  // namespace gradus::backend::cpu::tile
