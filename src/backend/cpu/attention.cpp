// Fused scaled dot-product attention on the CPU: FlashAttention-2's tiling with OpenBLAS tiles.
//
// Forward, per (batch, tile of kRows queries), on one thread: the scores against one tile of kCols
// keys at a time (a kRows x kCols GEMM), an online softmax (running row max m and sum l; the
// accumulated output is rescaled by exp(m_old - m_new) when the max grows), and acc += P V. Only
// one kRows x kCols tile of scores exists per thread, whatever T is. The row log-sum-exp
// m + log(l) is saved for the backward.
//
// Backward, recomputing P = exp(S - lse) tile by tile: with D_i = sum_d dO_id O_id,
//   dV = Pd^T dO,  dPd = dO V^T,  dS = P (z dPd - D),  dQ = scale dS K,  dK = scale dS^T Q,
// where z is the dropout multiplier (0 or 1 / (1 - p)) and Pd = z P. It runs in two passes so
// that every gradient row is written by one thread (no atomics, bitwise deterministic): pass 1
// over key tiles (dK, dV), pass 2 over query tiles (dQ). Each recomputes the scores once more,
// the usual price of not storing them. When there are enough (batch x head) entries to occupy
// every thread, or a head is a single tile, one pass per entry does it all instead: its task owns
// every gradient row of the entry, recomputes each tile once, and accumulates in the same order
// as the two passes, with tiles of the same shapes, so both give bitwise the same gradients
// whichever GEMM kernels the BLAS picks (each call's shape is the same in both).
//
// exp runs through vec::exp in `omp simd` loops (libm's expf is a scalar call, and the exps are
// most of this kernel's non-GEMM time at small head sizes).
//
// The tiles' work: float32 on a CPU with AVX-512 goes through attention_tiles.h (products without
// BLAS's call overhead, and AVX-512 where OpenBLAS and the build are held to AVX2). Its product
// reads the right operand row-major, so the two products by a transpose (S = Q K^T, dPd = dO V^T)
// read transposed copies of K and V made once per call. Everything else, and any CPU without
// AVX-512, goes through BLAS and the loops below.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention_tiles.h"
#include "backend/cpu/float_args.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/vec_math.h"

namespace gradus::backend::cpu {
namespace {

// Queries per tile. 32 rather than 64: with causal masking a query tile only multiplies the keys
// up to its last row, so a 64-long head computes 3 of its 4 quarter tiles (25% fewer
// multiply-adds and exps; 10% less time forward + backward at GPT-small shapes).
constexpr int64_t kRows = 32;
constexpr int64_t kCols = 64;  // keys per tile

// Row-major C = alpha op(A) op(B) + beta C on one thread's tile.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// True where the tiles of C's attention run on attention_tiles.h.
template <typename C>
bool avx512_tiles() {
  return std::is_same_v<C, float> && tile::avx512();
}

// A tile product C (+)= alpha op(A) B, B row-major: attention_tiles.h's kernel for float32 where
// it runs, else BLAS.
template <typename C>
void tile_product(bool ta, int64_t m, int64_t n, int64_t k, C alpha, const C* a, int64_t lda,
                  const C* b, int64_t ldb, C beta, C* c, int64_t ldc) {
  if constexpr (std::is_same_v<C, float>) {
    if (tile::avx512()) return tile::gemm(ta, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  gemm(ta, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// batch: the B * H query entries; group: the query heads one key/value head serves (1, or H /
// Hkv under grouped-query attention, where k and v have Hkv heads).
struct Dims {
  int64_t batch, tq, tk, d, dv, group;
  // The key/value entry of query entry bh = b * H + h: b * Hkv + h / group.
  int64_t kv(int64_t bh) const { return bh / group; }
  int64_t kv_entries() const { return batch / group; }
};

Dims dims_of(const Tensor& q, const Tensor& v) {
  return {q.size(0) * q.size(1),
          q.size(2),
          v.size(2),
          q.size(3),
          v.size(3),
          q.size(1) / std::max<int64_t>(v.size(1), 1)};
}

// One [B, H, T, D] operand: row t of entry bh = b * H + h, and the row stride (the GEMMs' ld).
template <typename P>
struct Rows {
  P* base;
  int64_t heads, sb, sh, ld;
  Rows(const Tensor& t, P* data)
      : base(data), heads(t.size(1)), sb(t.stride(0)), sh(t.stride(1)), ld(t.stride(2)) {
    if (t.size(2) <= 1) ld = std::max<int64_t>(t.size(3), 1);  // one row: its stride is unused
  }
  P* at(int64_t bh, int64_t row) const {
    return base + (bh / heads) * sb + (bh % heads) * sh + row * ld;
  }
};
template <typename C>
Rows<const C> rows_of(const Tensor& t) {
  return {t, t.data_ptr<C>()};
}
template <typename C>
Rows<C> mutable_rows_of(const Tensor& t) {
  return {t, t.data_ptr<C>()};
}

// K or V as the right operand of a product by its transpose (S = Q K^T, dPd = dO V^T). BLAS
// reads the rows transposed in place; attention_tiles.h's kernel reads a transposed copy laid out
// [entry, width, T] (one pass over K or V, next to the T / 2 passes of the products reading it).
template <typename C>
class Transposed {
 public:
  Transposed(const Tensor& t, int64_t entries)
      : rows_(rows_of<C>(t)), width_(t.size(3)), len_(t.size(2)) {
    if (!avx512_tiles<C>()) return;
    // A tensor, not a vector: the host allocator's cache spares the page faults of a new mapping
    // on every call, and --memory-limit sees it.
    copy_ = empty({entries * width_ * len_}, {DTypeOf<C>::value, Device::cpu(), false});
    C* base = copy_.data_ptr<C>();
    parallel_for(entries, 1, [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) {
        if constexpr (std::is_same_v<C, float>) {
          tile::transpose(rows_.at(e, 0), rows_.ld, len_, width_, base + e * width_ * len_, len_);
        }
      }
    });
  }
  // out[m x cols] (row stride ldo) = alpha * A[m x width] X[k0 .. k0 + cols)^T of entry e.
  void product(int64_t e, int64_t m, int64_t k0, int64_t cols, C alpha, const C* a, int64_t lda,
               C* out, int64_t ldo) const {
    if (!copy_.defined()) {
      gemm(false, true, m, cols, width_, alpha, a, lda, rows_.at(e, k0), rows_.ld, C(0), out, ldo);
    } else {
      const C* x = copy_.data_ptr<C>() + e * width_ * len_ + k0;
      tile_product(false, m, cols, width_, alpha, a, lda, x, len_, C(0), out, ldo);
    }
  }

 private:
  Rows<const C> rows_;
  int64_t width_, len_;
  Tensor copy_;
};

// Zeroes rows [t0, t0 + n) of entry bh.
template <typename C>
void zero_rows(const Rows<C>& r, int64_t bh, int64_t t0, int64_t n, int64_t width) {
  for (int64_t t = t0; t < t0 + n; ++t) std::fill(r.at(bh, t), r.at(bh, t) + width, C(0));
}

// Keys a query row sees in the key tile starting at k0 with `cols` keys.
inline int64_t visible(const AttentionArgs& a, int64_t i, int64_t k0, int64_t cols) {
  if (!a.causal) return cols;
  return std::clamp<int64_t>(i - k0 + 1, 0, cols);
}

// Multiplies row r of tile p (query i, keys k0..) by the dropout multipliers z of the stream.
template <typename C>
void apply_dropout(const AttentionArgs& a, const Dims& d, int64_t b, int64_t i, int64_t k0,
                   int64_t cols, C* p_row, float* u) {
  const int64_t first = (b * d.tq + i) * d.tk + k0;
  unit_floats(a.rng, first, cols, u);
  const float p = static_cast<float>(a.dropout_p);
  const C keep_scale = static_cast<C>(1.0 / (1.0 - a.dropout_p));
  for (int64_t j = 0; j < cols; ++j) p_row[j] = u[j] >= p ? p_row[j] * keep_scale : C(0);
}

// Tasks a thread should get at least, for tasks of `macs` multiply-adds each: about 64 K
// multiply-adds per thread, so that short sequences (and gradient checks) stay on the calling
// thread instead of waking, and spinning at the barrier of, a team (see threads_for).
int64_t task_grain(int64_t macs) {
  return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(macs, 1));
}

// The forward's online-softmax step on one tile of scores s (rows x cols of queries q0.., keys
// k0.., row stride kCols): the running max m and sum l grow, s becomes exp(s - m) (then the
// dropout multipliers), and acc is rescaled where the max grew. avx512: attention_tiles.h's copy
// (float32, no dropout).
template <typename C>
void online_softmax(const AttentionArgs& a, const Dims& d, int64_t b, int64_t q0, int64_t rows,
                    int64_t k0, int64_t cols, bool avx512, C* s, C* m, C* l, C* acc, float* u) {
  if constexpr (std::is_same_v<C, float>) {
    if (avx512) {
      return tile::online_softmax(s, kCols, rows, {a.causal, q0, k0, cols}, m, l, acc, d.dv);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    C* sr = s + r * kCols;
    const int64_t n = visible(a, q0 + r, k0, cols);
    C mx = m[r];
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < n; ++j) mx = sr[j] > mx ? sr[j] : mx;
    if (n == 0 || mx == -std::numeric_limits<C>::infinity()) {
      std::fill(sr, sr + cols, C(0));
      continue;
    }
    const C rescale = std::exp(m[r] - mx);  // 0 on the first visible tile
    C sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) {
      const C e = vec::exp(sr[j] - mx);
      sr[j] = e;
      sum += e;
    }
    std::fill(sr + n, sr + cols, C(0));
    l[r] = l[r] * rescale + sum;
    m[r] = mx;
    if (rescale != C(1)) {
      C* ar = acc + r * d.dv;
#pragma omp simd
      for (int64_t c = 0; c < d.dv; ++c) ar[c] *= rescale;
    }
    if (a.dropout_p > 0) apply_dropout(a, d, b, q0 + r, k0, cols, sr, u);
  }
}

template <typename C>
void forward(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& outt,
             const Tensor& lset, const AttentionArgs& a) {
  const Dims d = dims_of(qt, vt);
  const Rows<const C> q = rows_of<C>(qt), v = rows_of<C>(vt);
  const Rows<C> out = mutable_rows_of<C>(outt);
  C* lse = lset.data_ptr<C>();
  const int64_t qtiles = (d.tq + kRows - 1) / kRows;
  const C scale = static_cast<C>(a.scale);
  const bool dropout = a.dropout_p > 0;
  const int64_t tile_macs = std::min(kRows, d.tq) * d.tk * (d.d + d.dv);
  const Transposed<C> kT(kt, d.kv_entries());
  const bool fast_softmax = avx512_tiles<C>() && !dropout;
  parallel_for(d.batch * qtiles, task_grain(tile_macs), [&](int64_t begin, int64_t end) {
    std::vector<C> s(kRows * kCols), acc(kRows * d.dv), m(kRows), l(kRows);
    std::vector<float> u(dropout ? kCols : 0);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / qtiles, q0 = (task % qtiles) * kRows;
      const int64_t rows = std::min(kRows, d.tq - q0);
      const C* qb = q.at(b, q0);
      std::fill(m.begin(), m.end(), -std::numeric_limits<C>::infinity());
      std::fill(l.begin(), l.end(), C(0));
      std::fill(acc.begin(), acc.end(), C(0));
      const int64_t kend = a.causal ? std::min(d.tk, q0 + rows) : d.tk;
      for (int64_t k0 = 0; k0 < kend; k0 += kCols) {
        const int64_t cols = std::min(kCols, kend - k0);
        kT.product(d.kv(b), rows, k0, cols, scale, qb, q.ld, s.data(), kCols);
        online_softmax<C>(a, d, b, q0, rows, k0, cols, fast_softmax, s.data(), m.data(), l.data(),
                          acc.data(), u.data());
        tile_product(false, rows, d.dv, cols, C(1), s.data(), kCols, v.at(d.kv(b), k0), v.ld, C(1),
                     acc.data(), d.dv);
      }
      for (int64_t r = 0; r < rows; ++r) {
        // A row that sees no key (only possible when Tk = 0) outputs 0 with lse = -inf.
        const C inv = l[r] > 0 ? C(1) / l[r] : C(0);
        C* orow = out.at(b, q0 + r);
        for (int64_t c = 0; c < d.dv; ++c) orow[c] = acc[r * d.dv + c] * inv;
        lse[b * d.tq + q0 + r] = l[r] > 0 ? m[r] + std::log(l[r]) : m[r];
      }
    }
  });
}

// One tile of the backward's shared recomputation: P (rows x cols, ld kCols) from the scores and
// lse, and dS = P (z dPd - D) in ds, with Pd = z P left in p for dV.
template <typename C>
struct TileMath {
  const AttentionArgs& a;
  const Dims& d;
  Rows<const C> q, go;
  const Transposed<C>&kT, &vT;
  const C *lse, *delta;
  C scale;
  bool avx512_softmax;  // the softmax step on attention_tiles.h (float32 without dropout)
  // Fills p with Pd and ds with dS for queries q0.. (rows) and keys k0.. (cols) of batch b.
  void run(int64_t b, int64_t q0, int64_t rows, int64_t k0, int64_t cols, C* p, C* ds,
           float* u) const {
    kT.product(d.kv(b), rows, k0, cols, scale, q.at(b, q0), q.ld, p, kCols);
    vT.product(d.kv(b), rows, k0, cols, C(1), go.at(b, q0), go.ld, ds, kCols);  // dPd = dO V^T
    if constexpr (std::is_same_v<C, float>) {
      if (avx512_softmax) {
        return tile::softmax_backward(p, ds, kCols, rows, {a.causal, q0, k0, cols},
                                      lse + b * d.tq + q0, delta + b * d.tq + q0);
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = q0 + r;
      C* pr = p + r * kCols;
      C* dr = ds + r * kCols;
      const int64_t n = visible(a, i, k0, cols);
      const C row_lse = lse[b * d.tq + i];
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) pr[j] = vec::exp(pr[j] - row_lse);
      std::fill(pr + n, pr + cols, C(0));
      if (a.dropout_p > 0) {
        // z dPd: the same multipliers as the forward's, drawn again from the stream.
        apply_dropout(a, d, b, i, k0, cols, dr, u);
        const C dl = delta[b * d.tq + i];
        for (int64_t j = 0; j < cols; ++j) dr[j] = pr[j] * (dr[j] - dl);
        apply_dropout(a, d, b, i, k0, cols, pr, u);  // P -> Pd
      } else {
        const C dl = delta[b * d.tq + i];
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) dr[j] = pr[j] * (dr[j] - dl);
      }
    }
  }
};

template <typename C>
void backward(const Tensor& got, const Tensor& qt, const Tensor& kt, const Tensor& vt,
              const Tensor& outt, const Tensor& lset, const Tensor& gqt, const Tensor& gkt,
              const Tensor& gvt, const AttentionArgs& a) {
  const Dims d = dims_of(qt, vt);
  const Rows<const C> go = rows_of<C>(got), o = rows_of<C>(outt), q = rows_of<C>(qt),
                      k = rows_of<C>(kt);
  std::vector<C> delta(d.batch * d.tq);
  parallel_for(d.batch * d.tq, 256, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const C* gr = go.at(row / d.tq, row % d.tq);
      const C* orow = o.at(row / d.tq, row % d.tq);
      C sum = 0;
      for (int64_t c = 0; c < d.dv; ++c) sum += gr[c] * orow[c];
      delta[row] = sum;
    }
  });
  const C scale = static_cast<C>(a.scale);
  const Transposed<C> kT(kt, d.kv_entries()), vT(vt, d.kv_entries());
  const bool dropout = a.dropout_p > 0;
  const TileMath<C> tile{
      a, d, q, go, kT, vT, lset.data_ptr<C>(), delta.data(), scale, avx512_tiles<C>() && !dropout};

  const int64_t ktiles = (d.tk + kCols - 1) / kCols;
  const int64_t qtiles = (d.tq + kRows - 1) / kRows;
  const Rows<C> gk = mutable_rows_of<C>(gkt), gv = mutable_rows_of<C>(gvt),
                gq = mutable_rows_of<C>(gqt);

  if ((ktiles == 1 && qtiles == 1) || d.kv_entries() >= 4 * int64_t{omp_get_max_threads()}) {
    // One pass per key/value entry: its query heads in order, q tiles outer and key tiles inner,
    // give each dK / dV tile its (head, query tile)s in ascending order and each dQ tile its key
    // tiles in ascending order, exactly the two passes' orders.
    const int64_t grain = task_grain(2 * d.group * d.tq * d.tk * (d.d + d.dv));
    parallel_for(d.kv_entries(), grain, [&](int64_t begin, int64_t end) {
      std::vector<C> p(kRows * kCols), ds(kRows * kCols);
      std::vector<float> u(dropout ? kCols : 0);
      for (int64_t e = begin; e < end; ++e) {
        zero_rows(gk, e, 0, d.tk, d.d);
        zero_rows(gv, e, 0, d.tk, d.dv);
        for (int64_t b = e * d.group; b < (e + 1) * d.group; ++b) {
          zero_rows(gq, b, 0, d.tq, d.d);
          for (int64_t q0 = 0; q0 < d.tq; q0 += kRows) {
            const int64_t rows = std::min(kRows, d.tq - q0);
            const int64_t kend = a.causal ? std::min(d.tk, q0 + rows) : d.tk;
            for (int64_t k0 = 0; k0 < kend; k0 += kCols) {
              const int64_t cols = std::min(kCols, kend - k0);
              tile.run(b, q0, rows, k0, cols, p.data(), ds.data(), u.data());
              tile_product(true, cols, d.dv, rows, C(1), p.data(), kCols, go.at(b, q0), go.ld, C(1),
                           gv.at(e, k0), gv.ld);
              tile_product(true, cols, d.d, rows, scale, ds.data(), kCols, q.at(b, q0), q.ld, C(1),
                           gk.at(e, k0), gk.ld);
              tile_product(false, rows, d.d, cols, scale, ds.data(), kCols, k.at(e, k0), k.ld, C(1),
                           gq.at(b, q0), gq.ld);
            }
          }
        }
      }
    });
    return;
  }

  // Pass 1: dK and dV, one key tile of a key/value entry per task, over its query heads in order.
  const int64_t ktile_macs = 2 * d.group * std::min(kCols, d.tk) * d.tq * (d.d + d.dv);
  parallel_for(d.kv_entries() * ktiles, task_grain(ktile_macs), [&](int64_t begin, int64_t end) {
    std::vector<C> p(kRows * kCols), ds(kRows * kCols);
    std::vector<float> u(dropout ? kCols : 0);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t e = task / ktiles, k0 = (task % ktiles) * kCols;
      const int64_t cols = std::min(kCols, d.tk - k0);
      C* gke = gk.at(e, k0);
      C* gve = gv.at(e, k0);
      zero_rows(gk, e, k0, cols, d.d);
      zero_rows(gv, e, k0, cols, d.dv);
      for (int64_t b = e * d.group; b < (e + 1) * d.group; ++b) {
        // Causal: queries before k0 see none of these keys.
        for (int64_t q0 = a.causal ? (k0 / kRows) * kRows : 0; q0 < d.tq; q0 += kRows) {
          const int64_t rows = std::min(kRows, d.tq - q0);
          // The tile's shape is the one-pass path's (causal: the keys up to the tile's last
          // query, as in the forward), not just the same values: a BLAS may round an m x n
          // product differently from the first m x n' rows of a wider one (OpenBLAS's Haswell
          // kernels do).
          const int64_t seen = a.causal ? std::min(cols, q0 + rows - k0) : cols;
          tile.run(b, q0, rows, k0, seen, p.data(), ds.data(), u.data());
          tile_product(true, seen, d.dv, rows, C(1), p.data(), kCols, go.at(b, q0), go.ld, C(1),
                       gve, gv.ld);
          tile_product(true, seen, d.d, rows, scale, ds.data(), kCols, q.at(b, q0), q.ld, C(1), gke,
                       gk.ld);
        }
      }
    }
  });

  // Pass 2: dQ, one query tile per task.
  const int64_t qtile_macs = 2 * std::min(kRows, d.tq) * d.tk * d.d;
  parallel_for(d.batch * qtiles, task_grain(qtile_macs), [&](int64_t begin, int64_t end) {
    std::vector<C> p(kRows * kCols), ds(kRows * kCols);
    std::vector<float> u(dropout ? kCols : 0);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / qtiles, q0 = (task % qtiles) * kRows;
      const int64_t rows = std::min(kRows, d.tq - q0);
      C* gqb = gq.at(b, q0);
      zero_rows(gq, b, q0, rows, d.d);
      const int64_t kend = a.causal ? std::min(d.tk, q0 + rows) : d.tk;
      for (int64_t k0 = 0; k0 < kend; k0 += kCols) {
        const int64_t cols = std::min(kCols, kend - k0);
        tile.run(b, q0, rows, k0, cols, p.data(), ds.data(), u.data());
        tile_product(false, rows, d.d, cols, scale, ds.data(), kCols, k.at(d.kv(b), k0), k.ld, C(1),
                     gqb, gq.ld);
      }
    }
  });
}

}  // namespace

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                           const Tensor& lse, const AttentionArgs& args) {
  if (out.numel() == 0) return;
  F32Args f{*this, {}};
  const Tensor qf = f.in(q), kf = f.in(k), vf = f.in(v), of = f.out(out);
  dispatch_f(qf.dtype(), [&](auto tag) {
    using C = decltype(tag);
    forward<C>(qf, kf, vf, of, lse, args);
  });
  f.finish();
}

void CpuBackend::attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    const Tensor& grad_q, const Tensor& grad_k,
                                    const Tensor& grad_v, const AttentionArgs& args) {
  if (k.numel() == 0) {  // no keys: the output was 0 whatever q was
    fill(grad_q, 0.0);
    return;
  }
  F32Args f{*this, {}};
  const Tensor gof = f.in(grad_out), qf = f.in(q), kf = f.in(k), vf = f.in(v), of = f.in(out);
  const Tensor gq = f.out(grad_q), gk = f.out(grad_k), gv = f.out(grad_v);
  dispatch_f(qf.dtype(), [&](auto tag) {
    using C = decltype(tag);
    backward<C>(gof, qf, kf, vf, of, lse, gq, gk, gv, args);
  });
  f.finish();
}

}  // namespace gradus::backend::cpu
