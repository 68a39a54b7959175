// The boundary between the backend's host code (.cpp) and its kernels (.cu): plain structs of
// pointers, sizes and element strides, and one launcher per kernel family. Launchers enqueue on
// the given stream, check the launch, and never synchronize. Included by both compilers, so no
// gradus::Tensor here.
//
// Iterators hold operands that share one iteration shape, after the host has merged adjacent dims
// and dropped size-1 dims: at most kMaxDims dims and fewer than 2^31 elements (the host splits
// bigger problems), so kernels index with 32-bit arithmetic.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"
#include "gradus/core/dtype.h"
#include "gradus/core/random.h"

namespace gradus::backend::cuda {

inline constexpr int kMaxDims = 8;

// N operands over one shape. sizes/strides are outermost first; strides in elements (0 =
// broadcast). Operand 0 is the output where there is one.
template <int N>
struct Iter {
  int ndim = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
  void* data[N] = {};
  DType dtype[N] = {};

  bool contiguous() const {
    if (ndim > 1) return false;
    for (int k = 0; k < N; ++k) {
      if (ndim == 1 && strides[k][0] != 1) return false;
    }
    return true;
  }
};

// ---------------------------------------------------------------------------- copy.cu
// dst (operand 0) = cast(src (operand 1)).
void launch_copy(const Iter<2>& it, cudaStream_t stream);
void launch_fill(const Iter<1>& it, double value, cudaStream_t stream);
// Flat contiguous: dst[i] = start + i * step.
void launch_arange(void* dst, DType dtype, int64_t n, double start, double step,
                   cudaStream_t stream);

// ---------------------------------------------------------------------------- unary.cu, binary.cu
void launch_unary(UnaryOp op, const Iter<2>& it, double a, double b, cudaStream_t stream);
void launch_binary(BinaryOp op, const Iter<3>& it, double alpha, cudaStream_t stream);
void launch_ternary(TernaryOp op, const Iter<4>& it, double alpha, cudaStream_t stream);

// ---------------------------------------------------------------------------- reduce.cu
// x viewed as [outputs, reduced]: `kept` iterates the output elements (operand 0 = out, 1 = x),
// `reduced` the reduced axes of x (operand 0 = x strides). count = reduced element count.
struct ReduceProblem {
  Iter<2> kept;
  Iter<1> reduced;
  int64_t outputs = 0;
  int64_t count = 0;
  DType in_dtype = DType::f32;
  DType out_dtype = DType::f32;
  void* in = nullptr;
  void* out = nullptr;
};
// workspace: at least reduce_workspace_bytes(problem) bytes of device memory (may be null when
// that is 0).
size_t reduce_workspace_bytes(ReduceOp op, const ReduceProblem& p, int multiprocessors);
void launch_reduce(ReduceOp op, const ReduceProblem& p, void* workspace, int multiprocessors,
                   cudaStream_t stream);

// ---------------------------------------------------------------------------- softmax.cu
void launch_softmax(const void* x, void* out, DType dtype, int64_t rows, int64_t cols, bool log,
                    cudaStream_t stream);
void launch_softmax_backward(const void* grad_out, const void* y, void* grad_in, DType dtype,
                             int64_t rows, int64_t cols, bool log, cudaStream_t stream);
struct CrossEntropyArgs {
  const void* logits = nullptr;  // [n, c]
  const int64_t* target = nullptr;  // [n]
  const void* weight = nullptr;  // [c] or null
  DType dtype = DType::f32;      // of logits and weight
  DType loss_dtype = DType::f32;  // of loss, lse and grad_loss
  int64_t n = 0, c = 0;
  int64_t ignore_index = -100;
  double label_smoothing = 0;
};
void launch_cross_entropy(const CrossEntropyArgs& a, void* loss, void* lse, cudaStream_t stream);
void launch_cross_entropy_backward(const CrossEntropyArgs& a, const void* grad_loss,
                                   const void* lse, void* grad_logits, cudaStream_t stream);

// ---------------------------------------------------------------------------- norm.cu
struct NormArgs {
  DType dtype = DType::f32;       // of x, out, grads, weight, bias
  DType stat_dtype = DType::f32;  // of mean/rstd (and running stats for batch norm)
  const void* x = nullptr;
  const void* weight = nullptr;  // may be null
  const void* bias = nullptr;    // may be null
  void* out = nullptr;
  void* mean = nullptr;
  void* rstd = nullptr;
  double eps = 1e-5;
};
// x [rows, cols].
void launch_layer_norm(const NormArgs& a, int64_t rows, int64_t cols, cudaStream_t stream);
void launch_layer_norm_backward(const NormArgs& a, const void* grad_out, void* grad_x,
                                void* grad_weight, void* grad_bias, int64_t rows, int64_t cols,
                                void* workspace, cudaStream_t stream);
size_t layer_norm_backward_workspace_bytes(int64_t rows, int64_t cols);
// x [n, c, s]. running_* may be null; in eval mode mean/rstd are the running stats.
void launch_batch_norm(const NormArgs& a, void* running_mean, void* running_var, bool training,
                       double momentum, int64_t n, int64_t c, int64_t s, cudaStream_t stream);
void launch_batch_norm_backward(const NormArgs& a, const void* grad_out, void* grad_x,
                                void* grad_weight, void* grad_bias, int64_t n, int64_t c,
                                int64_t s, cudaStream_t stream);

// ---------------------------------------------------------------------------- pool.cu
struct PoolShape {
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
};
void launch_max_pool2d(const void* x, void* out, int64_t* indices, DType dtype,
                       const PoolShape& s, const Pool2dArgs& a, cudaStream_t stream);
// grad_x must be zeroed by the caller.
void launch_max_pool2d_backward(const void* grad_out, const int64_t* indices, void* grad_x,
                                DType dtype, const PoolShape& s, cudaStream_t stream);
void launch_avg_pool2d(const void* x, void* out, DType dtype, const PoolShape& s,
                       const Pool2dArgs& a, cudaStream_t stream);
void launch_avg_pool2d_backward(const void* grad_out, void* grad_x, DType dtype,
                                const PoolShape& s, const Pool2dArgs& a, cudaStream_t stream);
void launch_adaptive_avg_pool2d(const void* x, void* out, DType dtype, const PoolShape& s,
                                cudaStream_t stream);
void launch_adaptive_avg_pool2d_backward(const void* grad_out, void* grad_x, DType dtype,
                                         const PoolShape& s, cudaStream_t stream);

// ---------------------------------------------------------------------------- index.cu
void launch_index_select_rows(const void* table, const int64_t* index, void* out, DType dtype,
                              int64_t n, int64_t d, int64_t vocab, cudaStream_t stream);
void launch_index_add_rows(const void* grad_out, const int64_t* index, void* grad_table,
                           DType dtype, int64_t n, int64_t d, int64_t vocab, cudaStream_t stream);
// Contiguous tensors of one rank; `index` has the output's (gather) / src's (scatter) shape.
struct GatherShape {
  int ndim = 0;
  int64_t index_sizes[kMaxDims] = {};
  int64_t self_sizes[kMaxDims] = {};  // x for gather, out for scatter_add
  int dim = 0;
  int64_t numel = 0;  // of index
};
void launch_gather(const void* x, const int64_t* index, void* out, DType dtype,
                   const GatherShape& s, cudaStream_t stream);
void launch_scatter_add(void* out, const int64_t* index, const void* src, DType dtype,
                        const GatherShape& s, cudaStream_t stream);
// out[o, c] += in[o, c] over a [outer, channels, inner] tensor: adds bias[c] (conv bias).
void launch_add_channel_bias(void* out, const void* bias, DType dtype, int64_t outer,
                             int64_t channels, int64_t inner, cudaStream_t stream);

// ---------------------------------------------------------------------------- random.cu
// Contiguous outputs, numbers drawn per the layout in gradus/core/random.h.
void launch_uniform(void* out, DType dtype, int64_t n, PhiloxState s, double lo, double hi,
                    cudaStream_t stream);
void launch_normal(void* out, DType dtype, int64_t n, PhiloxState s, double mean, double std,
                   cudaStream_t stream);
// out (operand 0) = u < p (operand 1); u drawn for the flat (row-major) index of out.
void launch_bernoulli(const Iter<2>& it_out_p, const int64_t* logical_sizes, int logical_ndim,
                      PhiloxState s, cudaStream_t stream);
void launch_dropout(const void* x, void* out, uint8_t* mask, DType dtype, int64_t n, double p,
                    PhiloxState s, cudaStream_t stream);

// ---------------------------------------------------------------------------- optim.cu
// One launch over many tensors: the host packs pointer tables into device memory.
struct MultiTensorList {
  int64_t count = 0;
  void* const* params = nullptr;      // device array of `count` pointers
  void* const* grads = nullptr;
  void* const* state1 = nullptr;      // momentum buffer / exp_avg
  void* const* state2 = nullptr;      // exp_avg_sq
  void* const* state3 = nullptr;      // max_exp_avg_sq
  const int64_t* sizes = nullptr;     // device array of element counts
  const int64_t* chunk_start = nullptr;  // device prefix sums of chunks per tensor (count + 1)
  int64_t total_chunks = 0;
  DType param_dtype = DType::f32;
  DType grad_dtype = DType::f32;
  DType state_dtype = DType::f32;
};
inline constexpr int64_t kMultiTensorChunk = 65536;
void launch_sgd(const MultiTensorList& l, const SgdArgs& a, cudaStream_t stream);
void launch_adam(const MultiTensorList& l, const AdamArgs& a, cudaStream_t stream);

}  // namespace gradus::backend::cuda
