// The backend interface: ~30 primitive kernels that every op is built from.
//
// Contract for every kernel:
//  - The op layer (src/ops) has already checked shapes, dtypes and devices and allocated outputs;
//    kernels do not re-validate user input.
//  - All tensor arguments live on the backend's device. Inputs may be arbitrarily strided
//    (including stride-0 broadcast dims) unless a kernel says "contiguous"; outputs are written
//    through their strides too.
//  - Elementwise kernels get inputs already broadcast (expanded) to the output's shape.
//  - Half types (f16, bf16) are computed in float32 and rounded once when stored.
//  - Every kernel has a CPU twin (src/backend/cpu) that the tests use as the reference.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/common/index_check.h"
#include "gradus/core/random.h"
#include "gradus/core/tensor.h"

namespace gradus::backend {

// y = f(x; a, b). The scalars a/b are the op's parameters where it has any.
enum class UnaryOp : uint8_t {
  identity,  // y = x (used for casts through copy)
  neg,       // -x
  abs,
  sign,
  exp,
  log,
  log1p,
  expm1,
  sqrt,
  rsqrt,
  reciprocal,
  square,
  sin,
  cos,
  tanh,
  sigmoid,
  relu,
  leaky_relu,  // a = negative slope
  gelu,        // exact (erf)
  gelu_tanh,   // tanh approximation
  silu,
  softplus,  // a = beta, b = threshold (PyTorch semantics)
  erf,
  floor,
  ceil,
  round,        // half to even
  logical_not,  // output bool
  isnan,        // output bool
  isinf,        // output bool
  affine,       // a * x + b   (covers add/mul by scalar)
  pow_scalar,   // x ^ a
  rpow_scalar,  // a ^ x
  clamp,        // min(max(x, a), b); NaN bounds mean "no bound"
  // Derivative helpers taking one tensor:
  tanh_grad_from_output,     // 1 - y^2
  sigmoid_grad_from_output,  // y (1 - y)
};

// y = f(a, b; alpha)
enum class BinaryOp : uint8_t {
  add,  // a + alpha * b
  sub,  // a - alpha * b
  mul,
  div,
  pow,
  maximum,
  minimum,
  atan2,
  fmod,       // C fmod semantics
  remainder,  // Python % semantics
  eq,         // comparisons write bool outputs
  ne,
  lt,
  le,
  gt,
  ge,
  logical_and,
  logical_or,
  logical_xor,
  // Backward helpers: a = upstream gradient, b = forward input x.
  relu_backward,        // a * (x > 0)
  leaky_relu_backward,  // a * (x > 0 ? 1 : alpha)
  gelu_backward,        // a * d/dx gelu(x)
  gelu_tanh_backward,
  silu_backward,
  sign_mul,  // a * sign(b)  (abs backward)
  swiglu,    // silu(a) * b  (the SwiGLU MLP's gate a and up projection b)
};

// y = f(a, b, c; alpha)
enum class TernaryOp : uint8_t {
  where,    // a (bool) ? b : c
  lerp,     // a + c * (b - a)
  addcmul,  // a + alpha * b * c
};

// Reductions over a set of axes. The output has the input's rank with size 1 at reduced axes.
enum class ReduceOp : uint8_t {
  sum,
  mean,
  prod,
  max,
  min,
  argmax,  // output i64; exactly one axis; first index of the extreme value
  argmin,
  sum_squares,  // sum x^2 (norms)
  logsumexp,
  any,  // output bool
  all,
};

// Epilogue fused into a GEMM after the optional bias add.
enum class Activation : uint8_t { none, relu, gelu, gelu_tanh };

struct GemmArgs {
  bool trans_a = false;  // use a^T (a is [B, K, M] then)
  bool trans_b = false;
  double alpha = 1.0;
  double beta = 0.0;             // out = alpha * op(a) @ op(b) + beta * out
  const Tensor* bias = nullptr;  // [N], added to every row
  Activation activation = Activation::none;
};

struct Conv2dArgs {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

struct Pool2dArgs {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;  // max pool only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg pool only
  int64_t divisor_override = 0;   // avg pool only; 0 = none
};

// Fused scaled dot-product attention (FlashAttention's algorithm: the T x T scores exist one tile
// at a time, the backward recomputes them from the saved row log-sum-exps).
struct AttentionArgs {
  double scale = 1.0;      // scores = scale * q k^T
  bool causal = false;     // query i sees keys j <= i (top-left aligned, PyTorch's is_causal)
  double dropout_p = 0.0;  // dropout on the normalised probabilities
  // Mask element (b, i, j) is element (b * Tq + i) * Tk + j of the Philox stream at `rng`, the
  // element dropout() would draw for the [B, Tq, Tk] probability tensor (random.h's layout).
  PhiloxState rng;
};

// Per-sample image augmentation of x [N, C, H, W] (random crop with zero padding, horizontal
// flip, per-channel normalisation, in that order), parameters from one Philox block per sample:
// sample n reads block rng.offset + n (words w0..w3; see augment_params.h). Either part may be off.
struct ImageAugmentArgs {
  int64_t padding = 0;  // crop: the output is the [H, W] window at (dy, dx) of the padded image
  double flip_p = 0.0;  // mirror the (cropped) sample along W with this probability
  PhiloxState rng;
  // Empty: no normalisation. Else C values each: out = (v - mean[c]) / std[c], computed in the
  // compute type (float; double for f64), padding zeros included (torchvision's order).
  std::vector<double> mean, std;
};

struct SgdArgs {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
  bool first_step = false;  // momentum buffers are initialised with the gradient
  // Capturable step (Optimizer::set_capturable): {lr, step} read where the kernel runs, on the
  // parameters' device, instead of `lr` above; nullptr otherwise.
  const double* device_scalars = nullptr;
};

struct AdamArgs {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW
  bool amsgrad = false;
  bool maximize = false;
  int64_t step = 1;  // step number after this update (for bias correction)
  // Capturable step (Optimizer::set_capturable): {lr, step after this update} read where the
  // kernel runs, on the parameters' device, instead of `lr` and `step` above; nullptr otherwise.
  const double* device_scalars = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType device_type() const = 0;
  virtual const char* name() const = 0;

  // ---- memory and movement ----
  // dst = cast(src); shapes equal (src may be broadcast); any dtypes; same device.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  // Contiguous bytes between this device and the host (the other side is host memory).
  virtual void copy_from_host(const void* host, const Tensor& dst_contiguous) = 0;
  virtual void copy_to_host(const Tensor& src_contiguous, void* host) = 0;
  // Between two devices of this backend's type (both contiguous, same dtype and size), ordered
  // after the work queued on the source and before later work on the destination; the source's
  // memory is not reused before the copy has read it. Only backends with several devices
  // (CUDA: peer to peer, without the host) implement it.
  virtual void copy_between_devices(const Tensor& src_contiguous, const Tensor& dst_contiguous) {
    throw DeviceError(detail::str_cat(name(), ": no copies between devices"));
  }
  virtual void fill(const Tensor& dst, double value) = 0;
  // dst[i] = start + i * step over the flattened (contiguous) dst.
  virtual void arange(const Tensor& dst, double start, double step) = 0;
  virtual void synchronize() = 0;

  // ---- elementwise ----
  // Inputs share out's shape (broadcast strides allowed). Input dtypes equal (the compute
  // dtype); out has that dtype, or bool for predicates and comparisons.
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
                      double alpha) = 0;
  // where: a is bool, b and c share a dtype. Others: all inputs one dtype.
  virtual void ternary(TernaryOp op, const Tensor& a, const Tensor& b, const Tensor& c,
                       const Tensor& out, double alpha) = 0;

  // ---- reductions ----
  // dims: sorted, unique, non-empty axes of x. out has x's rank with 1 at reduced axes.
  virtual void reduce(ReduceOp op, const Tensor& x, const Tensor& out,
                      const std::vector<int64_t>& dims) = 0;

  // ---- linear algebra ----
  // a: [B, M, K] (or [B, K, M] if trans_a), b: [B, K, N] (or [B, N, K]), out: [B, M, N].
  // Floating dtypes, all the same. Each operand's last two dims have one unit stride; batch
  // strides are arbitrary (0 = broadcast).
  virtual void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args) = 0;

  // ---- fused NN kernels (contiguous inputs and outputs unless stated) ----
  // Softmax or log-softmax along the last axis of a [rows, cols] view.
  virtual void softmax(const Tensor& x, const Tensor& out, bool log) = 0;
  // grad_in = softmax backward given the forward output y.
  virtual void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in,
                                bool log) = 0;
  // logits [N, C], target [N] i64 -> loss [N] (f32/f64 like logits) and lse [N] (saved for
  // backward). Rows whose target == ignore_index get loss 0. label_smoothing in [0, 1].
  // weight: optional [C] class weights (undefined Tensor = none).
  virtual void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                             int64_t ignore_index, double label_smoothing, const Tensor& loss,
                             const Tensor& lse) = 0;
  // grad_logits [N, C] = d(sum_i grad_loss[i] * loss[i]) / d logits.
  virtual void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits,
                                      const Tensor& target, const Tensor& weight,
                                      int64_t ignore_index, double label_smoothing,
                                      const Tensor& lse, const Tensor& grad_logits) = 0;
  // x [rows, cols] normalised over cols; weight/bias [cols] or undefined. mean/rstd [rows] f32
  // (f64 for f64 x). An undefined mean asks for RMS normalisation (rms_norm): no centring,
  // rstd = 1 / sqrt(mean(x^2) + eps), and the backward drops the mean's term likewise.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                          const Tensor& out, const Tensor& mean, const Tensor& rstd) = 0;
  // grad_weight / grad_bias may be undefined (not needed).
  virtual void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                                   const Tensor& grad_weight, const Tensor& grad_bias) = 0;
  // x [N, C, S] (S = spatial product). Training: batch statistics -> save_mean/save_rstd [C],
  // running stats updated in place (momentum; unbiased var) when defined. Eval: uses running
  // stats, save_* untouched.
  virtual void batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const Tensor& running_mean, const Tensor& running_var, bool training,
                          double momentum, double eps, const Tensor& out, const Tensor& save_mean,
                          const Tensor& save_rstd) = 0;
  // Training-mode backward (save_* from the forward). grad_weight/grad_bias may be undefined.
  virtual void batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_rstd,
                                   const Tensor& grad_x, const Tensor& grad_weight,
                                   const Tensor& grad_bias) = 0;
  // x [N, C, H, W], w [O, C/groups, KH, KW], bias [O] or undefined, out [N, O, OH, OW].
  virtual void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out,
                      const Conv2dArgs& args) = 0;
  virtual void conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Tensor& grad_x,
                                    const Conv2dArgs& args) = 0;
  // grad_bias may be undefined.
  virtual void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_w,
                                      const Tensor& grad_bias, const Conv2dArgs& args) = 0;
  // x [N, C, H, W] -> out [N, C, OH, OW], indices i64 (flat h * W + w within the plane).
  // Pooling backwards write every element of grad_x (the caller passes uninitialised memory).
  virtual void max_pool2d(const Tensor& x, const Tensor& out, const Tensor& indices,
                          const Pool2dArgs& args) = 0;
  virtual void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices,
                                   const Tensor& grad_x) = 0;
  virtual void avg_pool2d(const Tensor& x, const Tensor& out, const Pool2dArgs& args) = 0;
  virtual void avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x,
                                   const Pool2dArgs& args) = 0;
  virtual void adaptive_avg_pool2d(const Tensor& x, const Tensor& out) = 0;
  virtual void adaptive_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x) = 0;

  // q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv], out [B, H, Tq, Dv], one floating dtype,
  // each with any strides over (B, H, T) as long as the last dim is unit-stride and a row stride
  // is at least the row (so q, k, v can be head views of one [B, T, 3C] projection and out can
  // be laid out [B, T, H, Dv]); lse [B * H, Tq] contiguous (f32, f64 for f64 inputs): each
  // row's log-sum-exp of its scaled, unmasked scores. Entry (b, h) is entry b * H + h of the
  // dropout stream's batch.
  // Where grouped_query_attention() is true, k and v may have Hkv heads for an Hkv that divides
  // H: query head h reads key/value head h / (H / Hkv) (no repeated copies of k and v), and
  // grad_k / grad_v sum over the query heads a key/value head serves.
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const AttentionArgs& args) = 0;
  virtual bool grouped_query_attention() const { return false; }
  // Gradients of sum(grad_out * out) (q/k/v's shapes and dtype, the same stride rules), from
  // the forward's out and lse. Deterministic: no atomics, each gradient row is written by one
  // thread.
  virtual void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                                  const AttentionArgs& args) = 0;

  // The SwiGLU's gradients in one pass (one sigmoid per element): with s = sigmoid(gate),
  // grad_up = grad silu(gate) = grad gate s, grad_gate = grad up s (1 + gate (1 - s)). All five
  // contiguous, one shape and one floating dtype. (The forward is BinaryOp::swiglu.)
  virtual void swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                               const Tensor& grad_gate, const Tensor& grad_up) = 0;

  // Rotary position embedding in the "rotate half" layout: with x's last dim split as [x1, x2],
  // out = [x1 cos - x2 sin, x2 cos + x1 sin] (inverse: the rotation by minus the angle, which
  // is the backward). x [B, H, T, D] with any strides over (B, H, T) and a unit-stride last dim;
  // cos and sin [T, D / 2] contiguous; out [B, H, T, D] with any strides over (B, H, T) and a
  // unit-stride last dim; one floating dtype.
  virtual void rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse,
                                const Tensor& out) = 0;

  // ---- indexing ----
  // IndexError (index_error_message) unless every value of `index` (int64, contiguous) is in
  // [0, check.size) or equals check.allowed. The CPU checks before returning; CUDA queues the
  // check on the device and raises at the host's next wait on the device (at once with
  // GRADUS_CUDA_SYNC_CHECKS=1). The kernels that use indices skip out-of-range ones, so memory
  // outside the operands is never touched in between.
  virtual void check_index_range(const Tensor& index, const IndexCheck& check) = 0;
  // out[i, :] = table[index[i], :]; table [V, D] contiguous, index i64 contiguous, out [n, D].
  virtual void index_select_rows(const Tensor& table, const Tensor& index, const Tensor& out) = 0;
  // grad_table[index[i], :] += grad_out[i, :] (grad_table pre-zeroed by the caller).
  virtual void index_add_rows(const Tensor& grad_out, const Tensor& index,
                              const Tensor& grad_table) = 0;
  // torch.gather / scatter_add_ along `dim` (all contiguous, same rank).
  virtual void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) = 0;
  virtual void scatter_add(const Tensor& out, int64_t dim, const Tensor& index,
                           const Tensor& src) = 0;

  // ---- random (see gradus/core/random.h for the stream layout) ----
  // Uniform [lo, hi) for floating out; for integer out, integers in [lo, hi).
  virtual void uniform(const Tensor& out, PhiloxState state, double lo, double hi) = 0;
  virtual void normal(const Tensor& out, PhiloxState state, double mean, double std) = 0;
  // out = (u < p) as out's dtype; p is a tensor of probabilities broadcast to out.
  virtual void bernoulli(const Tensor& out, const Tensor& p, PhiloxState state) = 0;
  // Inverted dropout: mask = u >= p (u8), out = x * mask / (1 - p).
  virtual void dropout(const Tensor& x, double p, PhiloxState state, const Tensor& out,
                       const Tensor& mask) = 0;

  // ---- optimizers (multi-tensor; every tensor contiguous) ----
  virtual void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                        const std::vector<Tensor>& momentum_buffers, const SgdArgs& args) = 0;
  // max_exp_avg_sq empty unless amsgrad.
  virtual void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                         const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                         const std::vector<Tensor>& max_exp_avg_sq, const AdamArgs& args) = 0;

  // ---- mixed precision ----
  // Loss-scaling's unscale (amp::GradScaler): every tensor (contiguous, floating) is multiplied by
  // `scale` in place, in its own dtype's compute type, and found_inf (one float32 element on the
  // same device) is set to 1 when any element of any tensor was not finite; otherwise it is left
  // as it is. One pass over each tensor, no host synchronisation.
  virtual void unscale_and_check(const std::vector<Tensor>& tensors, double scale,
                                 const Tensor& found_inf) = 0;

  // ---- data augmentation ----
  // x, out [N, C, H, W] contiguous, one dtype (u8 or floating; floating when normalising).
  // Bit-identical on every backend for the same args.
  virtual void augment_images(const Tensor& x, const Tensor& out, const ImageAugmentArgs& args) = 0;
};

// The registry lives in src/ops/dispatch.cpp: the CPU backend is linked into gradus::autograd,
// the CUDA one is loaded at run time (src/core/cuda_module.h). backend_for throws DeviceError
// naming why there is no CUDA backend when the module is absent or did not load.
Backend& backend_for(DeviceType type);
inline Backend& backend_for(const Tensor& t) {
  return backend_for(t.device().type());
}

// Each backend library defines its own; they return a process-lifetime singleton.
Backend* cpu_backend();
Backend* cuda_backend();  // in the CUDA module only; also registers the CUDA allocator

}  // namespace gradus::backend
