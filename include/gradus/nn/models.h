// Ready-made models. Their state_dict keys equal those of the PyTorch nn.Sequential with the same
// layers, so weights trained in either framework load in the other.
//
//   MLP({784, 256, 128, 10})  = Sequential(Linear, ReLU, Linear, ReLU, Linear)
//                               keys: 0.weight 0.bias 2.weight 2.bias 4.weight 4.bias
//   With dropout > 0 a Dropout follows every hidden activation (keys 0, 3, 6, ...).
//   MLP::forward flattens inputs of rank > 2 to [N, -1] itself (no Flatten module, so the keys
//   stay those of the plain Sequential): [N, 1, 28, 28] images go straight in.
//
//   small_cnn() = Conv2d(1,32,3,p1) BatchNorm2d(32) ReLU MaxPool2d(2)            indices 0-3
//                 Conv2d(32,64,3,p1) BatchNorm2d(64) ReLU MaxPool2d(2)           indices 4-7
//                 Flatten Linear(3136,128) ReLU Linear(128,10)                   indices 8-11
//   bench_cnn() = the same without the BatchNorms (indices 0-9: conv relu pool conv relu pool
//                 flatten linear relu linear), the benchmark model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gradus/nn/container.h"
#include "gradus/nn/layers.h"

namespace gradus::nn {

// "relu", "gelu", "gelu_tanh", "silu", "tanh", "sigmoid", "leaky_relu", "identity";
// unknown names throw ValueError.
std::shared_ptr<Module> make_activation(const std::string& name);

class MLP : public Sequential {
 public:
  // sizes = {in, hidden..., out} (at least 2 entries).
  explicit MLP(const std::vector<int64_t>& sizes, const std::string& activation = "relu",
               double dropout = 0.0);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MLP"; }
  std::vector<int64_t> sizes;
};

// Input [N, in_channels, image_size, image_size]; the first Linear takes
// 64 * (image_size / 4)^2 features (3136 for 28x28 MNIST, 4096 for 32x32 CIFAR-10).
std::shared_ptr<Sequential> small_cnn(int64_t in_channels = 1, int64_t num_classes = 10,
                                      int64_t image_size = 28);
std::shared_ptr<Sequential> bench_cnn(int64_t in_channels = 1, int64_t num_classes = 10,
                                      int64_t image_size = 28);

// Input description for make_model (MNIST by default).
struct ModelSpec {
  int64_t in_channels = 1;
  int64_t image_size = 28;
  int64_t num_classes = 10;
};

// By name (in = in_channels * image_size^2, 784 for MNIST):
//   "mlp"       MLP in-256-128-classes (the training default)
//   "mlp-bench" MLP in-128-classes
//   "mlp-large" MLP in-1024-1024-classes
//   "cnn"       small_cnn (with BatchNorm)
//   "cnn-bench" bench_cnn (without BatchNorm)
//   "resnet20"  resnet20 (gradus/nn/resnet.h)
//   "resnet18"  resnet18, with the small-input stem when image_size <= 64
// Unknown names throw ValueError listing these.
std::shared_ptr<Module> make_model(const std::string& name, const ModelSpec& spec = {});
std::vector<std::string> model_names();

}  // namespace gradus::nn
