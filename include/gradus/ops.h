// The functional API: every differentiable op of gradus. Each op checks its arguments (throwing a
// typed error that names the op and the offending shapes/dtypes/devices), runs on the device of
// its inputs, and records its backward rule when grad mode is on and an input requires grad.
// Definitions live in src/ops/<family>.cpp, forward and backward side by side.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "gradus/core/random.h"
#include "gradus/core/tensor.h"

namespace gradus {

// ---------------------------------------------------------------- factories (src/ops/factory.cpp)
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// [start, end) with `step`; dtype from options.
Tensor arange(double start, double end, double step = 1.0, TensorOptions options = {});
Tensor arange(int64_t end, TensorOptions options = {.dtype = DType::i64});
Tensor eye(int64_t n, TensorOptions options = {});
// A tensor holding `values` (converted to options.dtype) with `shape` (default: 1-D).
Tensor tensor(const std::vector<double>& values, const Shape& shape = {},
              TensorOptions options = {});
// Wraps host data by copying it (T must match options.dtype's C++ type or be convertible).
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, TensorOptions options = {});
Tensor scalar_tensor(double value, TensorOptions options = {});

// Random (src/ops/random.cpp). Each draws from `gen` (default: the global generator).
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
// Integers in [low, high); default dtype i64.
Tensor randint(int64_t low, int64_t high, const Shape& shape,
               TensorOptions options = {.dtype = DType::i64}, Generator* gen = nullptr);
Tensor bernoulli(const Tensor& p, Generator* gen = nullptr);
Tensor bernoulli(const Shape& shape, double p, TensorOptions options = {},
                 Generator* gen = nullptr);
// A random permutation of 0..n-1 (i64).
Tensor randperm(int64_t n, TensorOptions options = {.dtype = DType::i64}, Generator* gen = nullptr);
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);
// In place, no autograd (initialisers).
Tensor& uniform_(Tensor& t, double lo, double hi, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean, double std, Generator* gen = nullptr);

// ------------------------------------------------------- elementwise (src/ops/elementwise.cpp)
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor pow(double base, const Tensor& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor atan2(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Tensor& b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

// Comparisons and logic return bool tensors and have no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
Tensor isnan(const Tensor& a);
Tensor isinf(const Tensor& a);
Tensor isfinite(const Tensor& a);

Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);
// Either bound may be omitted.
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, double b);
Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& weight);
Tensor addcmul(const Tensor& a, const Tensor& b, const Tensor& c, double value = 1.0);

// ----------------------------------------------------- activations (src/ops/activation.cpp)
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
enum class GeluApproximation { none, tanh };
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);
Tensor silu(const Tensor& x);
// silu(gate) * up in one pass (the SwiGLU MLP of Llama-family models): saves gate and up for the
// backward, not silu(gate) as the composite does. gate and up: one floating dtype, one shape.
Tensor swiglu(const Tensor& gate, const Tensor& up);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);

// --------------------------------------------------------- reductions (src/ops/reduction.cpp)
// An empty `dims` list means all axes.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// correction = 1 is the unbiased (Bessel) estimator, like PyTorch's default.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements
Tensor min(const Tensor& x);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor norm(const Tensor& x);  // Frobenius / L2 over all elements
Tensor any(const Tensor& x);
Tensor all(const Tensor& x);

// ---------------------------------------------------------------- linear algebra
// (src/ops/linalg.cpp) NumPy/PyTorch matmul semantics: 1-D, 2-D and batched with broadcast batch
// dims.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
// x [..., in] @ weight[out, in]^T + bias[out] (PyTorch's layout).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// The linear maps of one input, y_i = linear(x, weights[i], biases[i]) (biases empty, or one per
// weight, each possibly undefined): the q, k and v projections of an attention, the gate and up
// projections of a SwiGLU MLP. One op: its backward sums x's gradient over the maps inside the
// GEMMs (accumulating into one buffer) instead of adding the maps' separate gradients.
std::vector<Tensor> linears(const Tensor& x, const std::vector<Tensor>& weights,
                            const std::vector<Tensor>& biases = {});

// ------------------------------------------------------------- shape ops (src/ops/shape.cpp)
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// ------------------------------------------------------------- indexing (src/ops/indexing.cpp)
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Returns a copy of x with src added at index along dim (out-of-place scatter_add).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor embedding(const Tensor& weight, const Tensor& indices);
// i64 indices -> [.., num_classes] i64 (num_classes = -1: max + 1).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

// ------------------------------------------------------------ NN functional (src/ops/nn_*.cpp)
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

enum class Reduction { none, mean, sum };
struct CrossEntropyOptions {
  Tensor weight;  // [C] class weights, optional
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::mean;
};
// logits [N, C] (or [N, C, d...]) and class indices [N] (or [N, d...]).
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options = {});
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                const CrossEntropyOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean,
                                        const Tensor& pos_weight = Tensor());

struct Conv2dOptions {
  std::vector<int64_t> stride = {1, 1};
  std::vector<int64_t> padding = {0, 0};
  std::vector<int64_t> dilation = {1, 1};
  int64_t groups = 1;
};
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dOptions& options = {});

struct Pool2dOptions {
  std::vector<int64_t> kernel_size = {2, 2};
  std::vector<int64_t> stride = {};  // empty = kernel_size
  std::vector<int64_t> padding = {0, 0};
  std::vector<int64_t> dilation = {1, 1};  // max pool only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg pool only
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options);
Tensor adaptive_avg_pool2d(const Tensor& x, const std::vector<int64_t>& output_size);

// x [N, C, ...]. running_* may be undefined (then training statistics are always used).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);
// Normalises over the trailing dims given by normalized_shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// x / sqrt(mean(x^2 over the trailing normalized_shape dims) + eps) * weight (Llama's RMSNorm;
// PyTorch's rms_norm). Under autocast it computes in float32, as layer_norm does.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                double eps = 1e-6);
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

// ------------------------------------------------------------ attention (src/ops/attention.cpp)
struct AttentionOptions {
  bool causal = false;          // query i attends to keys j <= i (top-left aligned, as PyTorch)
  double dropout_p = 0.0;       // on the attention probabilities; pass 0 when not training
  std::optional<double> scale;  // default 1 / sqrt(head size)
  Generator* generator = nullptr;
  // Grouped-query attention (PyTorch's enable_gqa): 4-D k and v may have Hkv heads (dim 1) for an
  // Hkv that divides q's H; query head h attends with key/value head h / (H / Hkv). The CPU
  // kernel reads the shared heads in place; other devices repeat them first.
  bool enable_gqa = false;
};
// softmax(q k^T * scale [+ causal mask]) v, fused: on the CPU the [Tq, Tk] scores are never
// materialised (each thread holds one 64 x 64 tile), and backward recomputes them; on a GPU they
// are, through cuBLASLt, while they fit gradus::cuda::attention_scores_limit(). q [..., Tq, D],
// k [..., Tk, D], v [..., Tk, Dv] with equal leading dims (but the heads, with enable_gqa) ->
// [..., Tq, Dv]. The dropout mask is the one dropout() would draw for the [..., Tq, Tk]
// probabilities from the same generator state.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});
// Rotary position embedding (RoPE) in the "rotate half" layout of Llama and transformers: with
// x = [x1, x2] split along the last dim (size D), returns [x1 cos - x2 sin, x2 cos + x1 sin].
// x [..., T, D]; cos and sin [T, D / 2] (the angles of positions 0..T-1, see rotary_tables).
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);
// cos and sin of position p times theta^(-2i / head_dim) for p in [0, positions) and i in
// [0, head_dim / 2): two [positions, head_dim / 2] tensors, computed in float64, then `dtype`.
std::pair<Tensor, Tensor> rotary_tables(int64_t positions, int64_t head_dim, double theta,
                                        TensorOptions options = {});
// x with `value` where mask (bool, broadcast to x) is true; no gradient flows there.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// The lower / upper triangle of the last two dims (j - i <= diagonal / >= diagonal), 0 elsewhere.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// ------------------------------------------------------------- sampling (src/ops/sampling.cpp)
// The k largest values along `dim` (sorted, largest first) and their indices; values carry the
// gradient. Ties keep the lower index first.
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1);
// `num_samples` class indices per row of probs [N, C] or [C] (non-negative, not all zero; rows
// need not sum to 1), drawn with replacement from `gen` -> i64 [N, num_samples] or [num_samples].
Tensor multinomial(const Tensor& probs, int64_t num_samples, Generator* gen = nullptr);

// ---------------------------------------------------- image augmentation (src/ops/augment.cpp)
// Data transforms of an image batch x [N, C, H, W] (u8 or floating; normalisation needs floating)
// on x's device, like torchvision's RandomCrop(padding), RandomHorizontalFlip and Normalize but
// with parameters drawn per sample, deterministically from the generator: each random op
// reserves one Philox block per sample and sample n uses block offset + n (crop offsets from words
// 0 and 1, the flip from word 2; src/backend/augment_params.h), identical on every device. They
// are not differentiable: they record no graph and refuse an input that requires grad in grad
// mode.
//
// The [H, W] window at a random offset of x zero-padded by `padding` (0 <= padding <= min(H, W)).
Tensor random_crop(const Tensor& x, int64_t padding, Generator* gen = nullptr);
// Each sample mirrored along W with probability p.
Tensor random_horizontal_flip(const Tensor& x, double p = 0.5, Generator* gen = nullptr);
// (x - mean[c]) / std[c] per channel; mean and std hold C values (or one, for every channel).
Tensor normalize(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& std);
struct ImageAugmentOptions {
  int64_t crop_padding = 0;           // 0: no crop
  double flip_p = 0.0;                // 0: no flip
  std::vector<double> mean{}, std{};  // empty: no normalisation
};
// Crop, flip and normalisation in one pass over the batch (one block per sample for crop and flip
// together): equals normalize(random_horizontal_flip(random_crop(x, padding, g), p, g'), mean,
// std) where g' is g's state before the crop drew.
Tensor augment_images(const Tensor& x, const ImageAugmentOptions& options,
                      Generator* gen = nullptr);

}  // namespace gradus
