// Batched strided GEMM on cuBLASLt with the bias + activation epilogue fused where cuBLASLt has
// it (bias, relu, tanh-GELU), TF32 on request for float32, tensor cores with float32
// accumulation for f16 / bf16.
//
// Row-major to column-major: cuBLAS sees a row-major [r, c] matrix with leading dimension ld as a
// column-major [c, r] one. So out^T = op(b)^T op(a)^T is computed with b as cuBLAS's A operand
// and a as its B operand, m = N, n = M; the bias (one value per output column) becomes the
// per-row bias vector cuBLASLt epilogues expect. A column-major input (unit stride on the row
// axis) is the transposed row-major one with its transpose flag flipped. Layouts cuBLASLt
// rejects (or that no algorithm supports) fall back to cublasGemmEx per batch plus separate
// epilogue kernels.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/common/layout.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/runtime.h"

namespace gradus::backend::cuda {
namespace {

using common::BlasMatrix;
using common::matrix_view;
using common::MatrixView;

struct Types {
  cudaDataType_t data, scale;
  cublasComputeType_t compute;
};

Types types_for(DType t) {
  switch (t) {
    case DType::f64:
      return {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::f16:
      return {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::bf16:
      return {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    default:
      return {CUDA_R_32F, CUDA_R_32F,
              tf32_allowed() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
  }
}

int alignment_of(const void* p) {
  const auto v = reinterpret_cast<uintptr_t>(p);
  int a = 1;
  while (a < 256 && v % (a * 2) == 0) a *= 2;
  return a;
}

// The cuBLASLt problem after the row-major mapping (cuBLAS naming).
struct LtProblem {
  int device = 0;
  DType dtype = DType::f32;
  bool tf32 = false;
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int64_t m = 0, n = 0, k = 0;
  int64_t a_rows = 0, a_cols = 0, lda = 0, stride_a = 0;  // cuBLAS A = gradus b
  int64_t b_rows = 0, b_cols = 0, ldb = 0, stride_b = 0;  // cuBLAS B = gradus a
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  bool beta_nonzero = false;
  int align_a = 0, align_b = 0, align_c = 0, align_bias = 0;

  auto key() const {
    return std::make_tuple(device, static_cast<int>(dtype), tf32, static_cast<int>(op_a),
                           static_cast<int>(op_b), m, n, k, lda, ldb, ldc, stride_a, stride_b,
                           stride_c, batch, static_cast<int>(epilogue), beta_nonzero,
                           std::make_tuple(std::min(align_a, 256), std::min(align_b, 256),
                                           std::min(align_c, 256), std::min(align_bias, 256)));
  }
};

using AlgoKey = decltype(std::declval<LtProblem>().key());
struct CachedAlgo {
  bool ok = false;
  cublasLtMatmulAlgo_t algo{};
};
std::mutex g_algo_mu;
std::map<AlgoKey, CachedAlgo> g_algos;

// RAII holders for the descriptors of one call.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

void make_layout(cublasLtMatrixLayout_t* layout, cudaDataType_t type, int64_t rows, int64_t cols,
                 int64_t ld, int64_t batch, int64_t stride) {
  GRADUS_CUBLAS_CHECK("gemm", cublasLtMatrixLayoutCreate(layout, type, static_cast<uint64_t>(rows),
                                                         static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    GRADUS_CUBLAS_CHECK(
        "gemm", cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                 &count, sizeof count));
    GRADUS_CUBLAS_CHECK(
        "gemm", cublasLtMatrixLayoutSetAttribute(
                    *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
}

// Runs the problem on cuBLASLt; false when cuBLASLt has no algorithm for it.
bool run_lt(const LtProblem& p, const void* a, const void* b, void* c, const void* bias,
            double alpha, double beta) {
  const Types t = types_for(p.dtype);
  LtDescs d;
  GRADUS_CUBLAS_CHECK("gemm", cublasLtMatmulDescCreate(&d.op, t.compute, t.scale));
  GRADUS_CUBLAS_CHECK("gemm", cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                             &p.op_a, sizeof p.op_a));
  GRADUS_CUBLAS_CHECK("gemm", cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                             &p.op_b, sizeof p.op_b));
  if (p.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    GRADUS_CUBLAS_CHECK("gemm", cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                               &p.epilogue, sizeof p.epilogue));
  }
  if (bias != nullptr) {
    GRADUS_CUBLAS_CHECK("gemm", cublasLtMatmulDescSetAttribute(
                                    d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const cudaDataType_t bias_type = t.data;
    GRADUS_CUBLAS_CHECK("gemm",
                        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                       &bias_type, sizeof bias_type));
  }
  make_layout(&d.a, t.data, p.a_rows, p.a_cols, p.lda, p.batch, p.stride_a);
  make_layout(&d.b, t.data, p.b_rows, p.b_cols, p.ldb, p.batch, p.stride_b);
  make_layout(&d.c, t.data, p.m, p.n, p.ldc, p.batch, p.stride_c);

  const AlgoKey key = p.key();
  CachedAlgo cached;
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(g_algo_mu);
    auto it = g_algos.find(key);
    if (it != g_algos.end()) {
      cached = it->second;
      found = true;
    }
  }
  cublasLtHandle_t handle = lt_handle(p.device);
  void* workspace = gemm_workspace(p.device);
  if (!found) {
    GRADUS_CUBLAS_CHECK("gemm", cublasLtMatmulPreferenceCreate(&d.pref));
    const uint64_t ws = kGemmWorkspaceBytes;
    GRADUS_CUBLAS_CHECK("gemm",
                        cublasLtMatmulPreferenceSetAttribute(
                            d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    // cuBLASLt assumes 256-byte aligned buffers unless told otherwise; views can be less.
    const auto set_align = [&](cublasLtMatmulPreferenceAttributes_t attr, int align) {
      const uint32_t a = static_cast<uint32_t>(std::min(align, 256));
      GRADUS_CUBLAS_CHECK("gemm", cublasLtMatmulPreferenceSetAttribute(d.pref, attr, &a, sizeof a));
    };
    set_align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, p.align_a);
    set_align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, p.align_b);
    set_align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, p.align_c);
    set_align(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, p.align_c);
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, d.op, d.a, d.b, d.c, d.c,
                                                             d.pref, 1, &result, &returned);
    cached.ok =
        st == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (cached.ok) cached.algo = result.algo;
    std::lock_guard<std::mutex> lock(g_algo_mu);
    g_algos.emplace(key, cached);
  }
  if (!cached.ok) return false;
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* alpha_p = t.scale == CUDA_R_64F ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* beta_p = t.scale == CUDA_R_64F ? static_cast<const void*>(&beta) : &beta_f;
  const cublasStatus_t st =
      cublasLtMatmul(handle, d.op, alpha_p, a, d.a, b, d.b, beta_p, c, d.c, c, d.c, &cached.algo,
                     workspace, kGemmWorkspaceBytes, stream_of(p.device));
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
    std::lock_guard<std::mutex> lock(g_algo_mu);
    g_algos[key].ok = false;
    return false;
  }
  GRADUS_CUBLAS_CHECK("gemm", st);
  return true;
}

// cublasGemmEx per batch: the fallback for anything cuBLASLt declines.
void run_blas(const LtProblem& p, const void* a, const void* b, void* c, double alpha,
              double beta) {
  const Types t = types_for(p.dtype);
  const BlasLease lease(p.device);
  cublasHandle_t handle = lease.get();
  GRADUS_CUBLAS_CHECK(
      "gemm", cublasSetMathMode(handle, p.tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* alpha_p = t.scale == CUDA_R_64F ? static_cast<const void*>(&alpha) : &alpha_f;
  const void* beta_p = t.scale == CUDA_R_64F ? static_cast<const void*>(&beta) : &beta_f;
  const int64_t es = static_cast<int64_t>(dtype_size(p.dtype));
  for (int64_t i = 0; i < p.batch; ++i) {
    GRADUS_CUBLAS_CHECK(
        "gemm",
        cublasGemmEx(
            handle, p.op_a, p.op_b, static_cast<int>(p.m), static_cast<int>(p.n),
            static_cast<int>(p.k), alpha_p, static_cast<const char*>(a) + i * p.stride_a * es,
            t.data, static_cast<int>(p.lda), static_cast<const char*>(b) + i * p.stride_b * es,
            t.data, static_cast<int>(p.ldb), beta_p, static_cast<char*>(c) + i * p.stride_c * es,
            t.data, static_cast<int>(p.ldc), t.compute, CUBLAS_GEMM_DEFAULT));
  }
}

Tensor contiguous_copy(CudaBackend& be, const Tensor& t) {
  Tensor c = empty(t.sizes(), {t.dtype(), t.device()});
  be.copy(t, c);
  return c;
}

}  // namespace

void CudaBackend::gemm(const Tensor& a_in, const Tensor& b_in, const Tensor& out,
                       const GemmArgs& args) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  const int device = out.device().index();
  Tensor a = a_in, b = b_in;
  MatrixView va = matrix_view(a), vb = matrix_view(b), vo = matrix_view(out);
  BlasMatrix ma, mb, mo;
  if (!common::blas_matrix(va, ma)) {
    a = contiguous_copy(*this, a);
    va = matrix_view(a);
    common::blas_matrix(va, ma);
  }
  if (!common::blas_matrix(vb, mb)) {
    b = contiguous_copy(*this, b);
    vb = matrix_view(b);
    common::blas_matrix(vb, mb);
  }
  // The output must be row-major: otherwise compute into a contiguous temporary.
  if (!common::blas_matrix(vo, mo) || mo.transposed) {
    Tensor tmp = empty(out.sizes(), {out.dtype(), out.device()});
    if (args.beta != 0.0) copy(out, tmp);
    gemm(a, b, tmp, args);
    copy(tmp, out);
    return;
  }
  const bool fa = ma.transposed, fb = mb.transposed;
  const int64_t lda = ma.ld, ldb = mb.ld, ldc = mo.ld;
  const bool ta = args.trans_a != fa, tb = args.trans_b != fb;
  // Stored (row-major) extents after resolving the flip.
  const int64_t a_r = fa ? va.cols : va.rows, a_c = fa ? va.rows : va.cols;
  const int64_t b_r = fb ? vb.cols : vb.rows, b_c = fb ? vb.rows : vb.cols;
  const int64_t M = vo.rows, N = vo.cols, K = ta ? a_r : a_c;
  const int64_t batch = vo.batch;

  LtProblem p;
  p.device = device;
  p.dtype = out.dtype();
  p.tf32 = p.dtype == DType::f32 && tf32_allowed();
  p.m = N;
  p.n = M;
  p.k = K;
  // cuBLAS A = gradus b (stored b_r x b_c row-major = column-major b_c x b_r).
  p.op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  p.a_rows = b_c;
  p.a_cols = b_r;
  p.lda = ldb;
  p.stride_a = vb.batch == 1 ? 0 : vb.bs;
  p.op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  p.b_rows = a_c;
  p.b_cols = a_r;
  p.ldb = lda;
  p.stride_b = va.batch == 1 ? 0 : va.bs;
  p.ldc = ldc;
  p.stride_c = vo.bs;
  p.batch = batch;
  p.beta_nonzero = args.beta != 0.0;

  const Tensor* bias = args.bias != nullptr && args.bias->defined() ? args.bias : nullptr;
  Tensor bias_c;
  if (bias != nullptr && (bias->dtype() != out.dtype() || !bias->is_contiguous())) {
    bias_c = empty(bias->sizes(), {out.dtype(), out.device()});
    copy(*bias, bias_c);
    bias = &bias_c;
  }
  // Fused epilogues: bias, relu, tanh-GELU. Exact GELU is applied afterwards, and so is
  // tanh-GELU in float64: cuBLASLt's GELU epilogue is not double-accurate there (measured on an
  // H200: 2e-10 relative error against the CPU's double formula).
  const bool lt_gelu_tanh = args.activation == Activation::gelu_tanh && out.dtype() != DType::f64;
  const bool lt_act = args.activation == Activation::relu || lt_gelu_tanh;
  if (bias != nullptr) {
    p.epilogue = args.activation == Activation::relu ? CUBLASLT_EPILOGUE_RELU_BIAS
                 : lt_gelu_tanh                      ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                     : CUBLASLT_EPILOGUE_BIAS;
  } else if (lt_act) {
    p.epilogue =
        args.activation == Activation::relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_GELU;
  }
  p.align_a = alignment_of(b.raw_data());
  p.align_b = alignment_of(a.raw_data());
  p.align_c = alignment_of(out.raw_data());
  p.align_bias = bias != nullptr ? alignment_of(bias->raw_data()) : 0;

  bool fused = run_lt(p, b.raw_data(), a.raw_data(), out.raw_data(),
                      bias != nullptr ? bias->raw_data() : nullptr, args.alpha, args.beta);
  if (!fused) {
    // Plain GEMM (cuBLASLt without epilogue, else cublasGemmEx), then separate epilogue kernels.
    LtProblem plain = p;
    plain.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    plain.align_bias = 0;
    if (!run_lt(plain, b.raw_data(), a.raw_data(), out.raw_data(), nullptr, args.alpha,
                args.beta)) {
      run_blas(plain, b.raw_data(), a.raw_data(), out.raw_data(), args.alpha, args.beta);
    }
    if (bias != nullptr) {
      Shape strides(static_cast<size_t>(out.dim()), 0);
      strides.back() = 1;
      binary(BinaryOp::add, out, bias->as_strided_raw(out.sizes(), strides, bias->offset()), out,
             1.0);
    }
  }
  // Activations cuBLASLt did not apply.
  UnaryOp act = UnaryOp::identity;
  if (args.activation == Activation::gelu) {
    act = UnaryOp::gelu;
  } else if (!fused && args.activation == Activation::relu) {
    act = UnaryOp::relu;
  } else if ((!fused || !lt_gelu_tanh) && args.activation == Activation::gelu_tanh) {
    act = UnaryOp::gelu_tanh;
  }
  if (act != UnaryOp::identity) unary(act, out, out, 0.0, 0.0);
}

}  // namespace gradus::backend::cuda
