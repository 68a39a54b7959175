// gradus train --augment (train_augment.h).
#include "train_augment.h"

#include <CLI/CLI.hpp>
#include <cstdio>

namespace gradus::cli {

void add_augment_options(CLI::App& train, TrainOptions& o) {
  train.add_flag("--augment", o.augment,
                 "Images: random crop with zero padding, horizontal flip (fashion-mnist) and "
                 "normalisation of every training batch, on the training device");
  train
      .add_option("--augment-padding", o.augment_padding,
                  "--augment: crop padding in pixels (default 2 for 28x28 images, 4 for 32x32)")
      ->check(CLI::NonNegativeNumber);
}

data::BatchTransform augment_transform(const TrainOptions& o, const data::TensorDataset& train_set,
                                       bool lead) {
  if (!o.augment) return {};
  const Tensor& x = train_set.inputs();
  GRADUS_CHECK(x.dim() == 4, ValueError, "train: --augment needs image inputs [N, C, H, W], got ",
               shape_str(x.sizes()));
  const int64_t side = std::min(x.size(2), x.size(3));
  // 4 pixels is the CIFAR convention for 32x32 (an eighth of the side); on 28x28 items that fill
  // the frame, 2 keeps the object whole while shifting it by up to 7%.
  const int64_t padding = o.augment_padding >= 0 ? o.augment_padding : side >= 32 ? 4 : 2;
  GRADUS_CHECK(padding <= side, ValueError, "train: --augment-padding ", padding,
               " is larger than the images (", side, " pixels)");
  const bool mnist = o.data == "mnist";
  ImageAugmentOptions a;
  a.crop_padding = padding;
  a.flip_p = mnist ? 0.0 : 0.5;
  a.mean = {mnist ? data::kMnistMean : data::kFashionMnistMean};
  a.std = {mnist ? data::kMnistStd : data::kFashionMnistStd};
  if (lead) {
    std::fprintf(stderr,
                 "gradus train: --augment: random crop (padding %lld)%s, normalisation (mean "
                 "%.4f, std %.4f), per batch on the training device\n",
                 static_cast<long long>(padding), mnist ? "" : ", horizontal flip (p 0.5)",
                 a.mean[0], a.std[0]);
  }
  return data::image_augment(std::move(a));
}

std::string data_wait_text(const data::LoaderStats& stats, double train_seconds) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), ", data wait %.2f s (%.1f%%)", stats.wait_seconds,
                100.0 * stats.wait_seconds / std::max(train_seconds, 1e-9));
  return buf;
}

}  // namespace gradus::cli
