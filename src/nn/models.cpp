// MLP, the small CNNs and the make_model factory used by the CLI (ResNets: resnet.cpp).
#include "gradus/nn/models.h"

#include "gradus/nn/resnet.h"

namespace gradus::nn {

std::shared_ptr<Module> make_activation(const std::string& name) {
  if (name == "relu") return std::make_shared<ReLU>();
  if (name == "gelu") return std::make_shared<GELU>();
  if (name == "gelu_tanh") return std::make_shared<GELU>(GeluApproximation::tanh);
  if (name == "silu") return std::make_shared<SiLU>();
  if (name == "tanh") return std::make_shared<Tanh>();
  if (name == "sigmoid") return std::make_shared<Sigmoid>();
  if (name == "leaky_relu") return std::make_shared<LeakyReLU>();
  if (name == "identity") return std::make_shared<Identity>();
  throw ValueError("make_activation: unknown activation \"" + name +
                   "\" (expected relu, gelu, gelu_tanh, silu, tanh, sigmoid, leaky_relu or "
                   "identity)");
}

MLP::MLP(const std::vector<int64_t>& sizes_, const std::string& activation, double dropout)
    : sizes(sizes_) {
  GRADUS_CHECK(sizes.size() >= 2, ValueError,
               "MLP: sizes needs at least an input and an output "
               "size, got ",
               sizes.size(), " entries");
  GRADUS_CHECK(dropout >= 0 && dropout < 1, ValueError, "MLP: dropout must be in [0, 1), got ",
               dropout);
  make_activation(activation);  // validates the name even when there is no hidden layer
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    push_back(std::make_shared<Linear>(sizes[i], sizes[i + 1]));
    if (i + 2 == sizes.size()) break;  // no activation after the output layer
    push_back(make_activation(activation));
    if (dropout > 0) push_back(std::make_shared<Dropout>(dropout));
  }
}

Tensor MLP::forward(const Tensor& x) {
  GRADUS_CHECK(x.defined(), ValueError, "MLP: undefined input");
  return Sequential::forward(x.dim() > 2 ? x.flatten(1) : x);
}

namespace {
std::shared_ptr<Sequential> cnn(int64_t in_channels, int64_t num_classes, int64_t image_size,
                                bool batch_norm) {
  GRADUS_CHECK(image_size >= 4, ValueError, "small_cnn: image_size must be at least 4, got ",
               image_size);
  auto net = std::make_shared<Sequential>();
  const ConvOptions pad1{.padding = 1};
  int64_t channels = in_channels;
  for (int64_t out : {32, 64}) {
    net->push_back(std::make_shared<Conv2d>(channels, out, 3, pad1));
    if (batch_norm) net->push_back(std::make_shared<BatchNorm2d>(out));
    net->push_back(std::make_shared<ReLU>());
    net->push_back(std::make_shared<MaxPool2d>(2));
    channels = out;
  }
  const int64_t side = image_size / 2 / 2;  // two 2x2 max pools (floor)
  net->push_back(std::make_shared<Flatten>());
  net->push_back(std::make_shared<Linear>(64 * side * side, 128));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<Linear>(128, num_classes));
  return net;
}
}  // namespace

std::shared_ptr<Sequential> small_cnn(int64_t in_channels, int64_t num_classes,
                                      int64_t image_size) {
  return cnn(in_channels, num_classes, image_size, true);
}

std::shared_ptr<Sequential> bench_cnn(int64_t in_channels, int64_t num_classes,
                                      int64_t image_size) {
  return cnn(in_channels, num_classes, image_size, false);
}

std::vector<std::string> model_names() {
  return {"mlp", "mlp-bench", "mlp-large", "cnn", "cnn-bench", "resnet20", "resnet18"};
}

std::shared_ptr<Module> make_model(const std::string& name, const ModelSpec& spec) {
  const int64_t in = spec.in_channels * spec.image_size * spec.image_size;
  if (name == "mlp")
    return std::make_shared<MLP>(std::vector<int64_t>{in, 256, 128, spec.num_classes});
  if (name == "mlp-bench")
    return std::make_shared<MLP>(std::vector<int64_t>{in, 128, spec.num_classes});
  if (name == "mlp-large")
    return std::make_shared<MLP>(std::vector<int64_t>{in, 1024, 1024, spec.num_classes});
  if (name == "cnn") return small_cnn(spec.in_channels, spec.num_classes, spec.image_size);
  if (name == "cnn-bench") return bench_cnn(spec.in_channels, spec.num_classes, spec.image_size);
  if (name == "resnet20") return resnet20(spec.in_channels, spec.num_classes);
  // ImageNet's stem would shrink a 32x32 image to 8x8 before the first block.
  if (name == "resnet18")
    return resnet18(spec.in_channels, spec.num_classes, spec.image_size <= 64);
  std::string known;
  for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw ValueError("make_model: unknown model \"" + name + "\" (available: " + known + ")");
}

}  // namespace gradus::nn
