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

// -------------------------------------------------------------------------- attention.cu
// q [batch, tq, d], k [batch, tk, d], v [batch, tk, dv], out [batch, tq, dv] contiguous, one
// floating dtype; lse / delta [batch, tq] in its compute type (float, double for f64).
inline constexpr int kMaxAttentionHead = 256;  // d and dv; the op layer checks
struct AttentionShape {
  int64_t batch, tq, tk, d, dv;
};
void launch_attention(const AttentionShape& s, const AttentionArgs& a, const void* q, const void* k,
                      const void* v, void* out, void* lse, DType dtype, cudaStream_t stream);
// delta: scratch [batch, tq] of the compute type.
void launch_attention_backward(const AttentionShape& s, const AttentionArgs& a,
                               const void* grad_out, const void* q, const void* k, const void* v,
                               const void* out, const void* lse, void* delta, void* grad_q,
                               void* grad_k, void* grad_v, DType dtype, cudaStream_t stream);

// The materialised path (attention.cpp): scores [batch, tq, tk] of the compute type (f32 or f64),
// already scaled by cuBLASLt. Forward: the scores become the dropped-out probabilities and lse
// is written. Backward: the scores become P = exp(s - lse) and `dropped` (nullable: no dropout)
// P * mask; then P becomes dS = P * (dp * mask - delta) for dp = dO v^T.
void launch_attention_softmax(const AttentionShape& s, const AttentionArgs& a, void* scores,
                              void* lse, DType compute, cudaStream_t stream);
void launch_attention_recompute(const AttentionShape& s, const AttentionArgs& a, void* scores,
                                void* dropped, const void* lse, DType compute, cudaStream_t stream);
void launch_attention_score_grad(const AttentionShape& s, const AttentionArgs& a, void* probs,
                                 const void* dp, const void* delta, DType compute,
                                 cudaStream_t stream);
// delta[r] = dO[r] . O[r] in dtype's compute type.
void launch_attention_delta(const AttentionShape& s, const void* grad_out, const void* out,
                            void* delta, DType dtype, cudaStream_t stream);

// ---------------------------------------------------------------------------- swiglu.cu
// n contiguous elements of each, all of `dtype` (Backend::swiglu_backward).
void launch_swiglu_backward(const void* grad, const void* gate, const void* up, void* grad_gate,
                            void* grad_up, int64_t n, DType dtype, cudaStream_t stream);

// ---------------------------------------------------------------------------- rotary.cu
struct RotaryArgs {
  DType dtype = DType::f32;
  int64_t b = 0, h = 0, t = 0, d = 0;  // x [B, H, T, D]
  int64_t sb = 0, sh = 0, st = 0;      // its strides (the last dim is unit-stride)
  int64_t osb = 0, osh = 0, ost = 0;   // out's strides (the last dim is unit-stride)
  bool inverse = false;                // rotate by minus the angle (the backward)
};
// out [B, H, T, D]; cos, sin [T, D / 2] contiguous, all of a.dtype.
void launch_rotary_embedding(const RotaryArgs& a, const void* x, const void* cos, const void* sin,
                             void* out, cudaStream_t stream);

// ---------------------------------------------------------------------------- softmax.cu
// Contiguous [rows, cols]; x / out / grads one dtype.
void launch_softmax(const void* x, void* out, DType dtype, int64_t rows, int64_t cols, bool log,
                    cudaStream_t stream);
void launch_softmax_backward(const void* grad_out, const void* y, void* grad_in, DType dtype,
                             int64_t rows, int64_t cols, bool log, cudaStream_t stream);
struct CrossEntropyArgs {
  const void* logits = nullptr;  // [n, c] contiguous
  DType dtype = DType::f32;      // of logits
  const void* target = nullptr;  // [n], any integer dtype, element stride target_stride
  DType target_dtype = DType::i64;
  int64_t target_stride = 1;
  const void* weight = nullptr;  // [c] contiguous or null
  DType weight_dtype = DType::f32;
  const double* weight_sum = nullptr;  // device scalar: sum of the class weights (null: c)
  int64_t n = 0, c = 0;
  int64_t ignore_index = -100;
  double label_smoothing = 0;
};
// loss / lse: [n] contiguous of loss_dtype.
void launch_cross_entropy(const CrossEntropyArgs& a, void* loss, void* lse, DType loss_dtype,
                          cudaStream_t stream);
// grad_loss: [n] with element stride grad_stride (0 = broadcast); lse [n] contiguous;
// grad_logits [n, c] contiguous of the logits dtype.
void launch_cross_entropy_backward(const CrossEntropyArgs& a, const void* grad_loss,
                                   int64_t grad_stride, const void* lse, DType loss_dtype,
                                   void* grad_logits, cudaStream_t stream);

// ---------------------------------------------------------------------------- norm.cu
// Tensors contiguous. x / out / grad_out / grad_x share `dtype`; weight, bias, statistics and
// parameter gradients carry their own dtypes (read and written at run time).
struct NormArgs {
  DType dtype = DType::f32;
  const void* x = nullptr;
  const void* weight = nullptr;  // may be null
  DType weight_dtype = DType::f32;
  const void* bias = nullptr;  // may be null
  DType bias_dtype = DType::f32;
  void* out = nullptr;
  void* mean = nullptr;
  void* rstd = nullptr;
  DType stat_dtype = DType::f32;
  double eps = 1e-5;
};
// x [rows, cols] -> out, mean [rows], rstd [rows].
void launch_layer_norm(const NormArgs& a, int64_t rows, int64_t cols, cudaStream_t stream);
size_t layer_norm_backward_workspace_bytes(int64_t rows, int64_t cols);
// grad_x / grad_weight / grad_bias may be null; grad_weight / grad_bias have the weight dtype.
void launch_layer_norm_backward(const NormArgs& a, const void* grad_out, void* grad_x,
                                void* grad_weight, void* grad_bias, DType param_grad_dtype,
                                int64_t rows, int64_t cols, void* workspace, cudaStream_t stream);
// x [n, c, s]. running_mean / running_var (dtype running_dtype) may be null. Training: batch
// statistics into mean / rstd (save_*) and running stats updated; eval: running stats used.
// workspace: batch_norm_workspace_bytes(c).
size_t batch_norm_workspace_bytes(int64_t c);
void launch_batch_norm(const NormArgs& a, void* running_mean, void* running_var,
                       DType running_dtype, bool training, double momentum, int64_t n, int64_t c,
                       int64_t s, void* workspace, cudaStream_t stream);
void launch_batch_norm_backward(const NormArgs& a, const void* grad_out, void* grad_x,
                                void* grad_weight, void* grad_bias, DType param_grad_dtype,
                                int64_t n, int64_t c, int64_t s, void* workspace,
                                cudaStream_t stream);

// ---------------------------------------------------------------------------- pool.cu
// Contiguous planes [planes, h, w] -> [planes, oh, ow].
struct PoolShape {
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
};
void launch_max_pool2d(const void* x, void* out, int64_t* indices, DType dtype, const PoolShape& s,
                       const Pool2dArgs& a, cudaStream_t stream);
// accum: zeroed float (double for f64) scratch of planes * h * w elements, or grad_x itself
// when grad_x is f32 / f64 (then zeroed by the caller).
void launch_max_pool2d_backward(const void* grad_out, const int64_t* indices, void* accum,
                                DType dtype, const PoolShape& s, bool ordered, cudaStream_t stream);
void launch_avg_pool2d(const void* x, void* out, DType dtype, const PoolShape& s,
                       const Pool2dArgs& a, cudaStream_t stream);
void launch_avg_pool2d_backward(const void* grad_out, void* grad_x, DType dtype, const PoolShape& s,
                                const Pool2dArgs& a, cudaStream_t stream);
void launch_adaptive_avg_pool2d(const void* x, void* out, DType dtype, const PoolShape& s,
                                cudaStream_t stream);
void launch_adaptive_avg_pool2d_backward(const void* grad_out, void* grad_x, DType dtype,
                                         const PoolShape& s, cudaStream_t stream);

// ---------------------------------------------------------------------------- im2col.cu
// Convolution without cuDNN: columns of `images` consecutive images for channel group g.
struct ConvGeom {
  int64_t c = 0, h = 0, w = 0;  // input channels (all groups), height, width
  int64_t cg = 0;               // channels per group
  int64_t kh = 0, kw = 0, oh = 0, ow = 0;
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};
// col [images, cg * kh * kw, oh * ow] from x (pointing at image 0, all channels) for group g.
void launch_im2col(const void* x, void* col, DType dtype, int64_t images, int64_t g,
                   const ConvGeom& geom, cudaStream_t stream);
// grad_x (pointing at image 0, all channels) for group g's channels = the sum of the columns
// that read each element (overwrites).
void launch_col2im(const void* col, void* grad_x, DType dtype, int64_t images, int64_t g,
                   const ConvGeom& geom, cudaStream_t stream);

// ---------------------------------------------------------------------------- index.cu
// The first out-of-range index a check kernel found on a device, in page-locked host memory
// mapped into the device (the host reads it after a sync without a copy). flag 0: none yet.
// Kernels only store to it (atomics on host memory are not portable); which thread reports is
// decided by an atomic on `claim`, an int in device memory that the host clears after reading.
struct DeviceIndexError {
  int flag;
  int site;  // which check (op, operand, size: device_checks.cpp)
  long long value;
};
// Reports into *error (once per clearing of *claim) a value of index[0, n) outside [0, size)
// that is not `allowed` (when has_allowed).
void launch_check_index_range(const int64_t* index, int64_t n, int64_t size, bool has_allowed,
                              int64_t allowed, int site, int* claim, DeviceIndexError* error,
                              cudaStream_t stream);
// The kernels below skip indices outside [0, rows) / [0, dim_size) (gathers write zeros), so an
// index the check has flagged but not yet reported never touches memory outside the operands.
// Row gather: out[i, :] = table[index[i], :] (rows of row_bytes bytes, all contiguous).
void launch_index_select_rows(const void* table, const int64_t* index, void* out, int64_t n,
                              int64_t row_bytes, int64_t rows, cudaStream_t stream);
// grad_table[index[i], :] += grad_out[i, :], width elements per row, rows rows in the table:
// with atomics, or (ordered) summing each element in index order, the same bits every run.
void launch_index_add_rows(const void* grad_out, const int64_t* index, void* grad_table,
                           DType dtype, int64_t n, int64_t width, int64_t rows, bool ordered,
                           cudaStream_t stream);
// Over the index's shape: operand 0 = out (gather) / self (scatter_add), 1 = index (i64),
// 2 = x (gather) / src (scatter_add). The indexed operand's stride along `dim` is zeroed in the
// iterator and passed as dim_stride; dim_size is its size along `dim`.
void launch_gather(const Iter<3>& it, int64_t dim_stride, int64_t dim_size, cudaStream_t stream);
void launch_scatter_add(const Iter<3>& it, int64_t dim_stride, int64_t dim_size,
                        cudaStream_t stream);

// ---------------------------------------------------------------------------- random.cu
// Element i of the flattened (row-major) output draws from the stream per gradus/core/random.h
// and the formulas of src/backend/cpu/random.cpp. Outputs contiguous; `first` is the flat index
// of out's first element (pieces of one draw).
void launch_uniform(void* out, DType dtype, int64_t n, int64_t first, PhiloxState s, double lo,
                    double hi, cudaStream_t stream);
void launch_normal(void* out, DType dtype, int64_t n, int64_t first, PhiloxState s, double mean,
                   double std, cudaStream_t stream);
// operand 0 = out (contiguous), 1 = p (any float dtype, any strides).
void launch_bernoulli(const Iter<2>& it, int64_t first, PhiloxState s, cudaStream_t stream);
// Contiguous x / out / mask.
void launch_dropout(const void* x, void* out, void* mask, DType dtype, DType mask_dtype, int64_t n,
                    int64_t first, double p, PhiloxState s, cudaStream_t stream);

// ---------------------------------------------------------------------------- optim.cu
// Up to kMaxTensorsPerLaunch contiguous tensors per launch, passed by value as kernel
// arguments; blocks take chunks of kOptimChunk elements.
inline constexpr int kMaxTensorsPerLaunch = 48;
inline constexpr int64_t kOptimChunk = 16384;
struct TensorList {
  int count = 0;
  DType param_dtype = DType::f32, grad_dtype = DType::f32, state_dtype = DType::f32;
  void* param[kMaxTensorsPerLaunch] = {};
  const void* grad[kMaxTensorsPerLaunch] = {};
  void* state1[kMaxTensorsPerLaunch] = {};  // momentum buffer / exp_avg (null: none)
  void* state2[kMaxTensorsPerLaunch] = {};  // exp_avg_sq
  void* state3[kMaxTensorsPerLaunch] = {};  // max_exp_avg_sq (amsgrad)
  int64_t numel[kMaxTensorsPerLaunch] = {};
  int32_t chunk_start[kMaxTensorsPerLaunch + 1] = {};  // prefix sums of chunks per tensor
};
void launch_sgd(const TensorList& l, const SgdArgs& a, cudaStream_t stream);
void launch_adam(const TensorList& l, const AdamArgs& a, cudaStream_t stream);
// amp: l.param[k] *= scale in place; *found_inf = 1 where an element was not finite.
void launch_unscale(const TensorList& l, double scale, float* found_inf, cudaStream_t stream);

// ---------------------------------------------------------------------------- augment.cu
// x, out [n, c, h, w] contiguous, one dtype (u8 or floating). Normalisation constants travel as a
// kernel argument (no device copy, no host synchronisation), hence the channel limit.
inline constexpr int kMaxAugmentChannels = 64;
struct AugmentLaunch {
  const void* x = nullptr;
  void* out = nullptr;
  DType dtype = DType::f32;
  int64_t n = 0, c = 0, h = 0, w = 0, padding = 0;
  float flip_p = 0.0f;
  PhiloxState rng;
  bool normalise = false;
  double mean[kMaxAugmentChannels] = {};
  double std[kMaxAugmentChannels] = {};
};
void launch_augment_images(const AugmentLaunch& a, cudaStream_t stream);

}  // namespace gradus::backend::cuda
