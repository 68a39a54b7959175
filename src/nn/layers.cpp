// The standard layers: parameter creation with PyTorch's default initialisation, forwards through
// the functional ops, and PyTorch-identical extra_repr strings.
#include "gradus/nn/layers.h"

#include <cmath>

#include "gradus/autograd.h"
#include "gradus/nn/init.h"

namespace gradus::nn {

namespace {
const char* py_bool(bool b) {
  return b ? "True" : "False";
}

void check_positive(const char* layer, const char* what, int64_t v) {
  GRADUS_CHECK(v > 0, ValueError, layer, ": ", what, " must be positive, got ", v);
}

// PyTorch's default for Linear/Conv: kaiming_uniform_(a=sqrt(5)) on the weight, which works out
// to U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
void default_init(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}
}  // namespace

std::string Size2::tuple_str() const {
  // (str_cat rather than operator+ chains, which trip GCC 12's false -Wrestrict positive.)
  return detail::str_cat("(", h, ", ", w, ")");
}

std::string Size2::str() const {
  return square() ? std::to_string(h) : tuple_str();
}

// ---------------------------------------------------------------------------------------- Linear
Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias)
    : in_features(in_features), out_features(out_features) {
  check_positive("Linear", "in_features", in_features);
  check_positive("Linear", "out_features", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", empty({out_features}));
  reset_parameters();
}

void Linear::reset_parameters() {
  default_init(weight, bias);
}

Tensor Linear::forward(const Tensor& x) {
  return linear(x, weight, bias);
}

std::string Linear::extra_repr() const {
  return detail::str_cat("in_features=", in_features, ", out_features=", out_features,
                         ", bias=", py_bool(bias.defined()));
}

// ---------------------------------------------------------------------------------------- Conv2d
Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, ConvOptions options)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      options(options) {
  check_positive("Conv2d", "in_channels", in_channels);
  check_positive("Conv2d", "out_channels", out_channels);
  check_positive("Conv2d", "groups", options.groups);
  GRADUS_CHECK(kernel_size.h > 0 && kernel_size.w > 0, ValueError,
               "Conv2d: kernel_size must be positive, got ", kernel_size.tuple_str());
  GRADUS_CHECK(options.stride.h > 0 && options.stride.w > 0, ValueError,
               "Conv2d: stride must be positive, got ", options.stride.tuple_str());
  GRADUS_CHECK(options.padding.h >= 0 && options.padding.w >= 0, ValueError,
               "Conv2d: padding must be non-negative, got ", options.padding.tuple_str());
  GRADUS_CHECK(options.dilation.h > 0 && options.dilation.w > 0, ValueError,
               "Conv2d: dilation must be positive, got ", options.dilation.tuple_str());
  GRADUS_CHECK(in_channels % options.groups == 0 && out_channels % options.groups == 0, ValueError,
               "Conv2d: in_channels (", in_channels, ") and out_channels (", out_channels,
               ") must both be divisible by groups (", options.groups, ")");
  weight = register_parameter(
      "weight", empty({out_channels, in_channels / options.groups, kernel_size.h, kernel_size.w}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void Conv2d::reset_parameters() {
  default_init(weight, bias);
}

Tensor Conv2d::forward(const Tensor& x) {
  gradus::Conv2dOptions o;
  o.stride = options.stride.vec();
  o.padding = options.padding.vec();
  o.dilation = options.dilation.vec();
  o.groups = options.groups;
  return conv2d(x, weight, bias, o);
}

std::string Conv2d::extra_repr() const {
  std::string s =
      detail::str_cat(in_channels, ", ", out_channels, ", kernel_size=", kernel_size.tuple_str(),
                      ", stride=", options.stride.tuple_str());
  if (options.padding.h != 0 || options.padding.w != 0)
    s += ", padding=" + options.padding.tuple_str();
  if (options.dilation.h != 1 || options.dilation.w != 1)
    s += ", dilation=" + options.dilation.tuple_str();
  if (options.groups != 1) s += ", groups=" + std::to_string(options.groups);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

// ------------------------------------------------------------------------------------- BatchNorm
BatchNormBase::BatchNormBase(int64_t num_features, double eps, std::optional<double> momentum,
                             bool affine, bool track_running_stats)
    : num_features(num_features),
      eps(eps),
      momentum(momentum),
      affine(affine),
      track_running_stats(track_running_stats) {
  check_positive("BatchNorm", "num_features", num_features);
  GRADUS_CHECK(eps > 0, ValueError, "BatchNorm: eps must be positive, got ", eps);
  GRADUS_CHECK(!momentum || (*momentum >= 0 && *momentum <= 1), ValueError,
               "BatchNorm: momentum must be in [0, 1], got ", momentum.value_or(0));
  if (affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::i64}));
  }
}

void BatchNormBase::reset_running_stats() {
  if (!track_running_stats) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

Tensor BatchNormBase::forward(const Tensor& x) {
  check_input(x);
  double factor = momentum.value_or(0.0);
  // A checkpoint's recomputation counts nothing: the forward already did (batch_norm also leaves
  // the running statistics alone then).
  if (is_training() && track_running_stats && !in_checkpoint_recompute()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(
        ones({}, {.dtype = DType::i64, .device = num_batches_tracked.device()}));
    // Cumulative moving average: reads the counter (a device sync), like PyTorch.
    if (!momentum) factor = 1.0 / num_batches_tracked.item();
  }
  // Batch statistics in training mode, and in eval mode when no running stats are kept.
  const bool use_batch_stats = is_training() || !track_running_stats;
  const bool update_running = !is_training() || track_running_stats;
  return batch_norm(x, update_running ? running_mean : Tensor(),
                    update_running ? running_var : Tensor(), weight, bias, use_batch_stats, factor,
                    eps);
}

std::string BatchNormBase::extra_repr() const {
  return detail::str_cat(num_features, ", eps=", python_float(eps),
                         ", momentum=", momentum ? python_float(*momentum) : "None",
                         ", affine=", py_bool(affine),
                         ", track_running_stats=", py_bool(track_running_stats));
}

void BatchNorm1d::check_input(const Tensor& x) const {
  GRADUS_CHECK(x.defined(), ValueError, "BatchNorm1d: undefined input");
  GRADUS_CHECK(x.dim() == 2 || x.dim() == 3, ShapeError,
               "BatchNorm1d: expected 2D or 3D input [N, C] or [N, C, L], got ", x.dim(),
               "D input of shape ", shape_str(x.sizes()));
}

void BatchNorm2d::check_input(const Tensor& x) const {
  GRADUS_CHECK(x.defined(), ValueError, "BatchNorm2d: undefined input");
  GRADUS_CHECK(x.dim() == 4, ShapeError, "BatchNorm2d: expected 4D input [N, C, H, W], got ",
               x.dim(), "D input of shape ", shape_str(x.sizes()));
}

// ------------------------------------------------------------------------------------- LayerNorm
LayerNorm::LayerNorm(Shape normalized_shape_, double eps, bool elementwise_affine, bool with_bias)
    : normalized_shape(std::move(normalized_shape_)),
      eps(eps),
      elementwise_affine(elementwise_affine) {
  GRADUS_CHECK(!normalized_shape.empty(), ValueError, "LayerNorm: normalized_shape is empty");
  for (int64_t d : normalized_shape)
    GRADUS_CHECK(d > 0, ValueError, "LayerNorm: normalized_shape ", shape_str(normalized_shape),
                 " must have positive sizes");
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape));
    if (with_bias) bias = register_parameter("bias", zeros(normalized_shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, normalized_shape, weight, bias, eps);
}

std::string LayerNorm::extra_repr() const {
  std::string shape = "(";
  for (size_t i = 0; i < normalized_shape.size(); ++i)
    shape += detail::str_cat(i ? ", " : "", normalized_shape[i]);
  shape += normalized_shape.size() == 1 ? ",)" : ")";
  return detail::str_cat(shape, ", eps=", python_float(eps),
                         ", elementwise_affine=", py_bool(elementwise_affine));
}

// --------------------------------------------------------------------------------------- RMSNorm
RMSNorm::RMSNorm(int64_t normalized_size, double eps, bool elementwise_affine)
    : normalized_shape{normalized_size}, eps(eps) {
  check_positive("RMSNorm", "normalized_size", normalized_size);
  GRADUS_CHECK(std::isfinite(eps) && eps >= 0, ValueError, "RMSNorm: eps must be >= 0, got ", eps);
  if (elementwise_affine) weight = register_parameter("weight", ones(normalized_shape));
}

Tensor RMSNorm::forward(const Tensor& x) {
  return rms_norm(x, normalized_shape, weight, eps);
}

std::string RMSNorm::extra_repr() const {
  return detail::str_cat("(", normalized_shape[0], ",), eps=", python_float(eps),
                         ", elementwise_affine=", py_bool(weight.defined()));
}

// --------------------------------------------------------------------------------------- Dropout
Dropout::Dropout(double p) : p(p) {
  GRADUS_CHECK(p >= 0 && p <= 1, ValueError,
               "Dropout: probability has to be between 0 and 1, but got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  return dropout(x, p, is_training());
}

std::string Dropout::extra_repr() const {
  return "p=" + python_float(p) + ", inplace=False";
}

// ------------------------------------------------------------------------------------- Embedding
Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  check_positive("Embedding", "num_embeddings", num_embeddings);
  check_positive("Embedding", "embedding_dim", embedding_dim);
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight, 0.0, 1.0);
}

Tensor Embedding::forward(const Tensor& indices) {
  return embedding(weight, indices);
}

std::string Embedding::extra_repr() const {
  return std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim);
}

// ----------------------------------------------------------------------------------- activations
std::string GELU::extra_repr() const {
  return approximate == GeluApproximation::tanh ? "approximate='tanh'" : "approximate='none'";
}

std::string LeakyReLU::extra_repr() const {
  return "negative_slope=" + python_float(negative_slope);
}

// --------------------------------------------------------------------------------------- pooling
MaxPool2d::MaxPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, Size2 dilation,
                     bool ceil_mode)
    : kernel_size(kernel_size),
      stride(stride.value_or(kernel_size)),
      padding(padding),
      dilation(dilation),
      ceil_mode(ceil_mode) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  Pool2dOptions o;
  o.kernel_size = kernel_size.vec();
  o.stride = stride.vec();
  o.padding = padding.vec();
  o.dilation = dilation.vec();
  o.ceil_mode = ceil_mode;
  return max_pool2d(x, o);
}

std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size.str() + ", stride=" + stride.str() +
         ", padding=" + padding.str() + ", dilation=" + dilation.str() +
         ", ceil_mode=" + py_bool(ceil_mode);
}

AvgPool2d::AvgPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, bool ceil_mode,
                     bool count_include_pad)
    : kernel_size(kernel_size),
      stride(stride.value_or(kernel_size)),
      padding(padding),
      ceil_mode(ceil_mode),
      count_include_pad(count_include_pad) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  Pool2dOptions o;
  o.kernel_size = kernel_size.vec();
  o.stride = stride.vec();
  o.padding = padding.vec();
  o.ceil_mode = ceil_mode;
  o.count_include_pad = count_include_pad;
  return avg_pool2d(x, o);
}

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size.str() + ", stride=" + stride.str() +
         ", padding=" + padding.str();
}

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
}

}  // namespace gradus::nn
