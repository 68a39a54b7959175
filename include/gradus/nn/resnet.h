// Residual networks (He et al., "Deep Residual Learning for Image Recognition", 2016) built from
// basic blocks. Module names, and so state_dict keys, are those of torchvision.models.ResNet, so
// torchvision's ResNet-18 weights load with load_state_dict:
//
//   conv1.weight  bn1.{weight,bias,running_mean,running_var,num_batches_tracked}
//   layer<s>.<b>.conv1.weight  layer<s>.<b>.bn1.*  layer<s>.<b>.conv2.weight  layer<s>.<b>.bn2.*
//   layer<s>.<b>.downsample.0.weight  layer<s>.<b>.downsample.1.*   (projection shortcuts only)
//   fc.weight  fc.bias
//
// Shortcuts: identity when a block keeps the shape; otherwise a projection (1x1 conv with the
// block's stride, no bias, then BatchNorm) named downsample.0 / downsample.1. For the CIFAR
// network (resnet20) this is the paper's option B. Option A (a strided, zero-padded identity
// without parameters; the paper's CIFAR table and its "0.27M") is not offered: it is a second
// code path for 1% of the parameters (269,722 with A, 272,474 with B, 3 channels, 10 classes).
//
// Initialisation as torchvision: convolutions kaiming_normal_(fan_out, relu), BatchNorm weight 1
// and bias 0, the final Linear its default. Every convolution is bias-free (a BatchNorm follows).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gradus/nn/container.h"
#include "gradus/nn/layers.h"

namespace gradus::nn {

// conv3x3(stride)-BN-ReLU-conv3x3-BN, plus the shortcut, then ReLU.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<ReLU> relu;
  std::shared_ptr<Sequential> downsample;  // null for an identity shortcut
};

// How the first convolution treats the image.
enum class ResNetStem {
  imagenet,  // 7x7 conv stride 2 (padding 3), then 3x3 max pool stride 2: 224 -> 56
  cifar,     // 3x3 conv stride 1 (padding 1), no pooling: keeps small images' resolution
};

struct ResNetConfig {
  int64_t in_channels = 3;
  int64_t num_classes = 1000;
  std::vector<int64_t> blocks = {2, 2, 2, 2};         // blocks per stage (layer1, layer2, ...)
  std::vector<int64_t> widths = {64, 128, 256, 512};  // channels per stage; the stem has widths[0]
  ResNetStem stem = ResNetStem::imagenet;
};

// Stem, stages (the first at stride 1, each later one halves the resolution with stride 2 in its
// first block), global average pooling, Linear. Any input of at least 1x1 after the stem works:
// the pooling is adaptive.
class ResNet : public Module {
 public:
  explicit ResNet(const ResNetConfig& config);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ResNet"; }

  ResNetConfig config;
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<ReLU> relu;
  std::shared_ptr<Module> maxpool;                  // MaxPool2d, or Identity for the cifar stem
  std::vector<std::shared_ptr<Sequential>> layers;  // registered as layer1, layer2, ...
  std::shared_ptr<AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<Linear> fc;
};

// ResNet-20 for CIFAR-sized images (paper section 4.2): cifar stem with `width` channels, three
// stages of three blocks with width, 2*width, 4*width channels (16/32/64 by default), strides
// 1/2/2. 32x32 inputs end at 8x8 before pooling, 28x28 at 7x7. 272,474 parameters for 3 input
// channels and 10 classes, 272,186 for 1 channel (option B shortcuts; see above). `width` exists
// so that tests can use a narrower copy of the same network.
std::shared_ptr<ResNet> resnet20(int64_t in_channels = 3, int64_t num_classes = 10,
                                 int64_t width = 16);

// torchvision's ResNet-18: stages [2, 2, 2, 2] of 64/128/256/512 channels; 11,689,512 parameters
// for 3 channels and 1000 classes. small_input = true swaps the stem for the cifar one (3x3
// stride 1, maxpool an Identity), the usual adaptation to 32x32 images: conv1.weight is then
// [64, in, 3, 3] and torchvision's ImageNet weights no longer fit it.
std::shared_ptr<ResNet> resnet18(int64_t in_channels = 3, int64_t num_classes = 1000,
                                 bool small_input = false);

}  // namespace gradus::nn
