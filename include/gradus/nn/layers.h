// Layers with PyTorch's constructor defaults, default initialisation, parameter/buffer names and
// repr. Forwards call the functional ops of gradus/ops.h. Construct with std::make_shared:
//   auto fc = std::make_shared<nn::Linear>(784, 128);
//   auto conv = std::make_shared<nn::Conv2d>(1, 32, 3, nn::ConvOptions{.padding = 1});
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gradus/nn/module.h"
#include "gradus/ops.h"

namespace gradus::nn {

// A (height, width) pair that converts from one integer (square) or from {h, w}.
struct Size2 {
  int64_t h = 0, w = 0;
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit on purpose (kernel_size=3)
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  bool square() const { return h == w; }
  std::vector<int64_t> vec() const { return {h, w}; }
  std::string tuple_str() const;  // "(3, 3)"
  std::string str() const;        // "3" when square, else "(3, 5)" (PyTorch's pooling repr)
};

// ------------------------------------------------------------------------------------ Linear
// y = x W^T + b; W [out, in], b [out]; both U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_(a=sqrt5)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  // Re-draws weight and bias with the default initialisation.
  void reset_parameters();

  int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined (and unregistered) when bias = false
};

// ------------------------------------------------------------------------------------ Conv2d
struct ConvOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// x [N, C_in, H, W] -> [N, C_out, OH, OW]; weight [C_out, C_in / groups, KH, KW], bias [C_out],
// both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = C_in / groups * KH * KW.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, ConvOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();

  int64_t in_channels, out_channels;
  Size2 kernel_size;
  ConvOptions options;
  Tensor weight, bias;
};

// ----------------------------------------------------------------------------- normalisation
// Shared by BatchNorm1d/2d. Parameters weight (ones) and bias (zeros) when affine; buffers
// running_mean (zeros), running_var (ones) and num_batches_tracked (i64 scalar) when
// track_running_stats. momentum = nullopt means a cumulative moving average (1 / batches seen).
class BatchNormBase : public Module {
 public:
  BatchNormBase(int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                bool track_running_stats);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_running_stats();

  int64_t num_features;
  double eps;
  std::optional<double> momentum;
  bool affine, track_running_stats;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 protected:
  virtual void check_input(const Tensor& x) const = 0;
};

// Input [N, C] or [N, C, L].
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input(const Tensor& x) const override;
};

// Input [N, C, H, W].
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true)
      : BatchNormBase(num_features, eps, momentum, affine, track_running_stats) {}

 protected:
  void check_input(const Tensor& x) const override;
};

// Normalises over the trailing normalized_shape dims; weight ones, bias zeros.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine, bias) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Shape normalized_shape;
  double eps;
  bool elementwise_affine;
  Tensor weight, bias;
};

// Root-mean-square normalisation over the trailing normalized_shape dims (Llama's RMSNorm,
// PyTorch's RMSNorm); weight ones.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t normalized_size, double eps = 1e-6, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Shape normalized_shape;
  double eps;
  Tensor weight;
};

// ------------------------------------------------------------------------------ regularisers
// Zeroes elements with probability p and scales the rest by 1 / (1 - p) in training mode;
// identity in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  double p;
};

// ----------------------------------------------------------------------------------- lookup
// indices (i64, any shape) -> [..., embedding_dim]; weight [num_embeddings, embedding_dim] N(0,1).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  int64_t num_embeddings, embedding_dim;
  Tensor weight;
};

// ------------------------------------------------------------------------------ activations
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximate = GeluApproximation::none)
      : approximate(approximate) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  std::string extra_repr() const override;
  GeluApproximation approximate;
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  std::string extra_repr() const override;
  double negative_slope;
};

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return softmax(x, dim); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) override { return log_softmax(x, dim); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim); }
  int64_t dim;
};

class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};

// ---------------------------------------------------------------------------------- pooling
// stride defaults to kernel_size.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                     Size2 padding = 0, Size2 dilation = 1, bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Size2 kernel_size, stride, padding, dilation;
  bool ceil_mode;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                     Size2 padding = 0, bool ceil_mode = false, bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Size2 kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size.vec()); }
  std::string extra_repr() const override { return "output_size=" + output_size.str(); }
  Size2 output_size;
};

// ---------------------------------------------------------------------------------- reshape
// Flattens dims start_dim..end_dim into one (default keeps the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

}  // namespace gradus::nn
