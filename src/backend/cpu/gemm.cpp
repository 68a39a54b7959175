// Batched strided GEMM on OpenBLAS, with the bias + activation epilogue.
//
// Each operand's matrix is handed to cblas as row-major with a leading dimension: a column-major
// operand (unit stride on the second-to-last axis) is the row-major transpose with the transpose
// flag flipped, and a column-major output computes C^T = op(B)^T op(A)^T. Anything else is made
// contiguous first. bf16 runs on the CPU's bf16 instructions where it has them, and float32 on
// oneDNN's AVX-512 kernels where the CPU has AVX-512: a single product without a bias or
// activation on oneDNN's sgemm, cut between the threads by their measured speed
// (balanced_gemm.h), the others on oneDNN's matmul with the epilogue fused (onednn_gemm.h);
// otherwise f16/bf16 are converted to f32, multiplied with sgemm and rounded back.
#include <cblas.h>

#include "backend/common/layout.h"
#include "backend/cpu/balanced_gemm.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend/cpu/vec_math.h"

namespace gradus::backend::cpu {
namespace {

// Below this many multiply-adds per matrix, batches run in parallel (OpenBLAS single-threaded in
// each); above it one matrix at a time with OpenBLAS's own threads.
constexpr int64_t kSmallGemm = int64_t{96} * 96 * 96;

using common::BlasMatrix;
using common::matrix_view;
using common::MatrixView;

// A [batch, rows, cols] tensor with batch 1 when t broadcasts over the batch (so broadcast
// operands are converted once, not per batch).
Tensor unbroadcast_batch(const Tensor& t) {
  if (t.dim() == 3 && t.size(0) > 1 && t.stride(0) == 0) {
    return t.as_strided_raw({1, t.size(1), t.size(2)}, {0, t.stride(1), t.stride(2)}, t.offset());
  }
  return t;
}

template <typename T>
void blas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const auto tr = [](bool t) { return t ? CblasTrans : CblasNoTrans; };
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
                static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  }
}

// One GEMM on all threads. OpenBLAS's own threading reaches only 100-130 GFLOP/s on 2 Zen 3
// cores for a transformer's shapes (768 x 128..512 x 128..768) where one single-threaded call per
// thread on a contiguous block of C's rows reaches 155-175 (and within 2% of it on large squares):
// each thread packs all of op(B), which is cheap next to its share of the work. Wide outputs
// (fewer rows than columns) keep OpenBLAS's split, which is better there. Measured with a
// stand-alone cblas timing of each shape; see docs/performance.md ("GPT").
template <typename T>
void threaded_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                   int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  constexpr int64_t kRowAlign = 16;  // a multiple of every OpenBLAS kernel's row unroll
  const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t blocks = std::min<int64_t>(threads, m / (2 * kRowAlign));
  if (blocks <= 1 || m < n || m * n * k <= kSmallGemm) {
    blas_gemm<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int64_t per = (m + blocks - 1) / blocks;
  const int64_t rows_per = (per + kRowAlign - 1) / kRowAlign * kRowAlign;
#pragma omp parallel for num_threads(static_cast <int>(blocks)) schedule(static, 1)
  for (int64_t t = 0; t < blocks; ++t) {
    const int64_t r0 = t * rows_per, rows = std::min(m, r0 + rows_per) - r0;
    if (rows <= 0) continue;
    // Row r0 of op(A): row r0 of A, or column r0 of the stored A^T.
    const T* ar = ta ? a + r0 : a + r0 * lda;
    blas_gemm<T>(ta, tb, rows, n, k, alpha, ar, lda, b, ldb, beta, c + r0 * ldc, ldc);
  }
}

template <typename T>
inline T activate(Activation act, T v) {
  switch (act) {
    case Activation::relu:
      return v < T(0) ? T(0) : v;
    case Activation::gelu:
      return vec::gelu(v);
    case Activation::gelu_tanh:
      return vec::gelu_tanh(v);
    default:
      return v;
  }
}

// out[b, m, :] = act(out[b, m, :] + bias), rows in parallel.
template <typename T>
void epilogue(const Tensor& out, const GemmArgs& args) {
  const MatrixView o = matrix_view(out);
  T* base = static_cast<T*>(out.raw_data());
  const T* bias = args.bias ? static_cast<const T*>(args.bias->raw_data()) : nullptr;
  const int64_t bias_stride = args.bias ? args.bias->stride(0) : 0;
  const Activation act = args.activation;
  parallel_for(o.batch * o.rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(o.cols, 1)),
               [&](int64_t r0, int64_t r1) {
                 for (int64_t r = r0; r < r1; ++r) {
                   T* row = base + (r / o.rows) * o.bs + (r % o.rows) * o.rs;
                   const int64_t n = o.cols, cs = o.cs;
                   if (cs == 1 && bias_stride == 1) {
                     switch (act) {  // one loop per activation so each vectorises
                       case Activation::relu:
#pragma omp simd
                         for (int64_t j = 0; j < n; ++j) {
                           const T v = row[j] + bias[j];
                           row[j] = v < T(0) ? T(0) : v;
                         }
                         break;
                       case Activation::gelu:
#pragma omp simd
                         for (int64_t j = 0; j < n; ++j) row[j] = vec::gelu(row[j] + bias[j]);
                         break;
                       case Activation::gelu_tanh:
#pragma omp simd
                         for (int64_t j = 0; j < n; ++j) row[j] = vec::gelu_tanh(row[j] + bias[j]);
                         break;
                       default:
#pragma omp simd
                         for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
                     }
                   } else if (cs == 1 && bias == nullptr) {
                     switch (act) {
                       case Activation::relu:
#pragma omp simd
                         for (int64_t j = 0; j < n; ++j) row[j] = row[j] < T(0) ? T(0) : row[j];
                         break;
                       case Activation::gelu:
#pragma omp simd
                         for (int64_t j = 0; j < n; ++j) row[j] = vec::gelu(row[j]);
                         break;
                       default:
#pragma omp simd
                         for (int64_t j = 0; j < n; ++j) row[j] = activate(act, row[j]);
                     }
                   } else {
                     for (int64_t j = 0; j < n; ++j) {
                       const T v = row[j * cs] + (bias ? bias[j * bias_stride] : T(0));
                       row[j * cs] = activate(act, v);
                     }
                   }
                 }
               });
}

template <typename T>
void gemm_typed(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args) {
  const MatrixView va = matrix_view(a), vb = matrix_view(b), vo = matrix_view(out);
  const int64_t batch = vo.batch, m = vo.rows, n = vo.cols;
  const int64_t k = args.trans_a ? va.rows : va.cols;
  BlasMatrix ma, mb, mo;  // the caller made every operand describable (CpuBackend::gemm)
  common::blas_matrix(va, ma);
  common::blas_matrix(vb, mb);
  common::blas_matrix(vo, mo);
  const int64_t lda = ma.ld, ldb = mb.ld, ldc = mo.ld;
  const bool ta = args.trans_a != ma.transposed, tb = args.trans_b != mb.transposed;
  const T alpha = static_cast<T>(args.alpha), beta = static_cast<T>(args.beta);
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  T* pc = static_cast<T*>(out.raw_data());
  const int64_t abs = va.batch == 1 ? 0 : va.bs, bbs = vb.batch == 1 ? 0 : vb.bs;

  if (k == 0) {  // op(a) @ op(b) is all zeros: out = beta * out (BLAS rejects ld = 0 here)
    for (int64_t i = 0; i < batch; ++i) {
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < n; ++c) {
          T& v = pc[i * vo.bs + r * vo.rs + c * vo.cs];
          v = beta == T(0) ? T(0) : beta * v;
        }
      }
    }
    if (args.bias != nullptr || args.activation != Activation::none) epilogue<T>(out, args);
    return;
  }
  auto one = [&](int64_t i) {
    const T* ai = pa + i * abs;
    const T* bi = pb + i * bbs;
    T* ci = pc + i * vo.bs;
    if (!mo.transposed) {
      threaded_gemm<T>(ta, tb, m, n, k, alpha, ai, lda, bi, ldb, beta, ci, ldc);
    } else {  // column-major out: C^T = op(B)^T op(A)^T
      threaded_gemm<T>(!tb, !ta, n, m, k, alpha, bi, ldb, ai, lda, beta, ci, ldc);
    }
  };
  // Small matrices: a thread per few of them, if together they are worth a team.
  const int batch_threads =
      omp_in_parallel() ? 1 : threads_for(batch * m * n * k, int64_t{1} << 17);
  if (batch > 1 && m * n * k <= kSmallGemm && batch_threads > 1) {
#pragma omp parallel for num_threads(batch_threads) schedule(static)
    for (int64_t i = 0; i < batch; ++i) one(i);
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
  if (args.bias != nullptr || args.activation != Activation::none) epilogue<T>(out, args);
}

}  // namespace

Tensor contiguous_copy(Backend& be, const Tensor& t, DType dtype) {
  Tensor c = empty(t.sizes(), {dtype, t.device(), false});
  be.copy(t, c);
  return c;
}

void CpuBackend::gemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args) {
  if (out.numel() == 0) return;
  const DType dt = out.dtype();
  GRADUS_CHECK(is_floating(dt), DTypeError, "gemm: expected a floating dtype, got ",
               dtype_name(dt));
  if (dt == DType::bf16 && onednn_gemm(*this, a, b, out, args)) return;
  if (balanced_sgemm(a, b, out, args)) return;  // float32 without an epilogue, on AVX-512
  if (dt == DType::f32 && onednn_f32_gemm()) {
    const MatrixView vo = matrix_view(out), va = matrix_view(a);
    const int64_t k = args.trans_a ? va.rows : va.cols;
    if (vo.rows * vo.cols * k >= onednn_f32_min_work() && onednn_gemm(*this, a, b, out, args))
      return;
  }
  // f16, and bf16 without bf16 instructions: multiply in f32 and round once when storing.
  if (dt == DType::f16 || dt == DType::bf16) {
    const Tensor a32 = contiguous_copy(*this, unbroadcast_batch(a), DType::f32);
    const Tensor b32 = contiguous_copy(*this, unbroadcast_batch(b), DType::f32);
    Tensor out32 = empty(out.sizes(), {DType::f32, out.device(), false});
    if (args.beta != 0.0) copy(out, out32);
    Tensor bias32;
    GemmArgs args32 = args;
    if (args.bias != nullptr) {
      bias32 = contiguous_copy(*this, *args.bias, DType::f32);
      args32.bias = &bias32;
    }
    gemm(a32, b32, out32, args32);  // a batch of 1 broadcasts (matrix_view gives it batch stride 0)
    copy(out32, out);
    return;
  }
  BlasMatrix layout;
  const MatrixView va = matrix_view(a);
  const bool empty_k = (args.trans_a ? va.rows : va.cols) == 0;  // no BLAS call at all
  // Operands whose matrices are neither row- nor column-major are made contiguous.
  if (!empty_k && !common::blas_matrix(va, layout)) {
    return gemm(contiguous_copy(*this, a, dt), b, out, args);
  }
  if (!empty_k && !common::blas_matrix(matrix_view(b), layout)) {
    return gemm(a, contiguous_copy(*this, b, dt), out, args);
  }
  if (!common::blas_matrix(matrix_view(out), layout)) {
    Tensor tmp = empty(out.sizes(), {dt, out.device(), false});
    if (args.beta != 0.0) copy(out, tmp);
    gemm(a, b, tmp, args);
    copy(tmp, out);
    return;
  }
  if (args.bias != nullptr && args.beta == 0.0) {
    // The bias is copied (broadcast over the rows) into the output first and the product
    // accumulated onto it (beta = 1): one pass instead of BLAS zeroing C for beta = 0 and the
    // epilogue reading it back to add the bias.
    Shape strides(static_cast<size_t>(out.dim()), 0);
    strides.back() = args.bias->stride(0);
    copy(args.bias->as_strided_raw(out.sizes(), strides, args.bias->offset()), out);
    GemmArgs accumulate = args;
    accumulate.bias = nullptr;
    accumulate.beta = 1.0;
    return gemm(a, b, out, accumulate);
  }
  if (dt == DType::f64) return gemm_typed<double>(a, b, out, args);
  gemm_typed<float>(a, b, out, args);
}

}  // namespace gradus::backend::cpu
