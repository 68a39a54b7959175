// ResNet: basic blocks, the generic network and the resnet20 / resnet18 factories.
#include "gradus/nn/resnet.h"

#include <string>

#include "gradus/nn/init.h"

namespace gradus::nn {

namespace {

// Every convolution of a ResNet is followed by a BatchNorm, whose shift makes a bias redundant.
std::shared_ptr<Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  ConvOptions o;
  o.stride = stride;
  o.padding = kernel / 2;  // "same" for odd kernels at stride 1
  o.bias = false;
  return std::make_shared<Conv2d>(in, out, kernel, o);
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride) {
  // Registration order is torchvision's, so state_dict and repr list the same order.
  conv1 = register_module("conv1", conv(in_channels, out_channels, 3, stride));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(out_channels));
  relu = register_module("relu", std::make_shared<ReLU>());
  conv2 = register_module("conv2", conv(out_channels, out_channels, 3, 1));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    // Option B: the shortcut must change shape, so it gets a learned projection.
    downsample = register_module("downsample", std::make_shared<Sequential>());
    downsample->push_back(conv(in_channels, out_channels, 1, stride));
    downsample->push_back(std::make_shared<BatchNorm2d>(out_channels));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  // Children are called through operator() (not forward) so that their hooks and checkpoint
  // flags apply, as in PyTorch.
  Tensor out = (*relu)((*bn1)((*conv1)(x)));
  out = (*bn2)((*conv2)(out));
  return (*relu)(out + (downsample ? (*downsample)(x) : x));
}

ResNet::ResNet(const ResNetConfig& config_) : config(config_) {
  GRADUS_CHECK(!config.blocks.empty() && config.blocks.size() == config.widths.size(), ValueError,
               "ResNet: blocks and widths need one entry per stage, got ", config.blocks.size(),
               " and ", config.widths.size());
  const bool imagenet = config.stem == ResNetStem::imagenet;
  int64_t channels = config.widths[0];
  conv1 = register_module("conv1",
                          conv(config.in_channels, channels, imagenet ? 7 : 3, imagenet ? 2 : 1));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(channels));
  relu = register_module("relu", std::make_shared<ReLU>());
  // torchvision has no flag for the small stem; replacing maxpool with an Identity is the usual
  // adaptation, and keeping a module under that name keeps repr close to torchvision's.
  std::shared_ptr<Module> pool = std::make_shared<Identity>();
  if (imagenet) pool = std::make_shared<MaxPool2d>(3, 2, 1);
  maxpool = register_module("maxpool", pool);
  for (size_t s = 0; s < config.blocks.size(); ++s) {
    GRADUS_CHECK(config.blocks[s] > 0 && config.widths[s] > 0, ValueError, "ResNet: stage ", s + 1,
                 " needs positive blocks and width, got ", config.blocks[s], " and ",
                 config.widths[s]);
    auto stage = std::make_shared<Sequential>();
    for (int64_t b = 0; b < config.blocks[s]; ++b) {
      // Only a stage's first block changes resolution (stride 2 after the first stage).
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      stage->push_back(std::make_shared<BasicBlock>(channels, config.widths[s], stride));
      channels = config.widths[s];
    }
    layers.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  avgpool = register_module("avgpool", std::make_shared<AdaptiveAvgPool2d>(1));
  fc = register_module("fc", std::make_shared<Linear>(channels, config.num_classes));

  // He initialisation with fan_out, as torchvision: it keeps the backward signal's variance
  // constant through conv-ReLU stacks. BatchNorm (ones / zeros) and Linear keep their defaults.
  apply([](Module& m) {
    if (auto* c = dynamic_cast<Conv2d*>(&m)) {
      init::kaiming_normal_(c->weight, 0.0, init::FanMode::fan_out, "relu");
    }
  });
}

Tensor ResNet::forward(const Tensor& x) {
  GRADUS_CHECK(x.defined() && x.dim() == 4, ShapeError, "ResNet: expected input [N, C, H, W], got ",
               x.defined() ? shape_str(x.sizes()) : std::string("undefined"));
  Tensor h = (*maxpool)((*relu)((*bn1)((*conv1)(x))));
  for (const auto& stage : layers) h = (*stage)(h);
  return (*fc)((*avgpool)(h).flatten(1));
}

std::shared_ptr<ResNet> resnet20(int64_t in_channels, int64_t num_classes, int64_t width) {
  return std::make_shared<ResNet>(ResNetConfig{.in_channels = in_channels,
                                               .num_classes = num_classes,
                                               .blocks = {3, 3, 3},
                                               .widths = {width, 2 * width, 4 * width},
                                               .stem = ResNetStem::cifar});
}

std::shared_ptr<ResNet> resnet18(int64_t in_channels, int64_t num_classes, bool small_input) {
  return std::make_shared<ResNet>(
      ResNetConfig{.in_channels = in_channels,
                   .num_classes = num_classes,
                   .blocks = {2, 2, 2, 2},
                   .widths = {64, 128, 256, 512},
                   .stem = small_input ? ResNetStem::cifar : ResNetStem::imagenet});
}

}  // namespace gradus::nn
