// The fused attention's per-tile work in float32 on AVX-512 (attention.cpp runs it where the CPU
// has AVX-512): the tile products, and the softmax steps between them. A BLAS call costs about a
// microsecond of fixed overhead, as much as a 32 x 64 x 32 tile's arithmetic, and OpenBLAS is held
// to its AVX2 kernels here (OPENBLAS_CORETYPE=Haswell); the softmax steps would otherwise run on
// the build's ISA (AVX2 at best). Written with intrinsics: GCC 12 builds the project with
// -mno-avx512f because its AVX-512 auto-vectoriser miscompiles (cmake/GradusHelpers.cmake).
#pragma once

#include <cstdint>

namespace gradus::backend::cpu::tile {

// True when the functions below may be called: the CPU has AVX-512 (F, BW, DQ, VL), this build
// has them (GCC on x86-64), and GRADUS_ATTENTION_ISA is not "base" (which keeps the tiles on BLAS
// and the build's ISA: tests cover both; also a way out should these ever misbehave somewhere).
bool avx512();

// C = alpha * op(A) B + beta * C, every matrix row-major: C is [m x n] (row stride ldc), B is
// [k x n] (ldb), A is [m x k] (lda) or, with a_transposed, stored as its transpose [k x m].
// beta is 0 (C is not read) or 1. Each element of C sums its k products in order, p = 0..k-1, in
// one chain of fused multiply-adds, so its value depends neither on m and n nor on the blocking.
void gemm(bool a_transposed, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// dst[c][t] = src[t][c] for t < rows, c < cols (row strides ld and ldd).
void transpose(const float* src, int64_t ld, int64_t rows, int64_t cols, float* dst, int64_t ldd);

// Which keys of a tile row r sees: all `cols`, or with causal masking those up to the query's
// own position, first_query + r, for a tile whose first key is first_key.
struct Visible {
  bool causal;
  int64_t first_query, first_key, cols;
  int64_t operator()(int64_t r) const {
    if (!causal) return cols;
    const int64_t n = first_query + r - first_key + 1;
    return n < 0 ? 0 : (n > cols ? cols : n);
  }
};

// The forward's online-softmax step on a tile of scores s (rows x vis.cols, row stride lds): per
// row r with n = vis(r) visible keys, the running max m[r] grows to cover s[r][0..n), the row
// becomes exp(s - m[r]) (0 past n), the running sum l[r] is rescaled and adds the row's sum, and
// acc's row (dv values, row stride dv) is rescaled by exp(m_old - m_new). A row with no visible
// key, or only -inf scores, becomes 0 and leaves m, l and acc as they were.
void online_softmax(float* s, int64_t lds, int64_t rows, const Visible& vis, float* m, float* l,
                    float* acc, int64_t dv);

// The backward's step on a tile: p = exp(p - lse[r]) on the visible keys (0 past them), then
// ds = p * (ds - delta[r]) over the whole row (ds holds dO V^T on entry). Row stride ld for both.
void softmax_backward(float* p, float* ds, int64_t ld, int64_t rows, const Visible& vis,
                      const float* lse, const float* delta);

}  // namespace gradus::backend::cpu::tile
