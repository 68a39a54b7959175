// MNIST and Fashion-MNIST as in-memory TensorDatasets: images [N, 1, 28, 28] float32, labels [N]
// int64 in [0, 10).
//
// Pixels are scaled to [0, 1] and normalised with the training set's mean and standard deviation:
// Fashion-MNIST 0.2860 / 0.3530, MNIST 0.1307 / 0.3081 (the values torchvision users apply).
// Files: {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or the same names without .gz).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gradus/data/dataset.h"

namespace gradus::data {

// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;
inline constexpr double kMnistMean = 0.1307;
inline constexpr double kMnistStd = 0.3081;

struct MnistOptions {
  std::string dir;
  bool train = true;   // train-* (60000 examples) or t10k-* (10000)
  int64_t limit = -1;  // keep only the first `limit` examples (-1: all)
  double mean = kFashionMnistMean;
  double std = kFashionMnistStd;
  // Appended to "cannot find ..." errors: how to get the files.
  std::string missing_hint;
};

// Throws IOError naming the file and the fix when the directory or a file is missing, a file
// is corrupt, the label and image counts differ or a label is outside [0, 10).
std::shared_ptr<TensorDataset> load_mnist_format(const MnistOptions& options);

// normalise = false: pixels in [0, 1], for a pipeline that normalises later (on the device, with
// data::image_augment).
std::shared_ptr<TensorDataset> load_fashion_mnist(const std::string& dir = kDefaultFashionMnistDir,
                                                  bool train = true, int64_t limit = -1,
                                                  bool normalise = true);
std::shared_ptr<TensorDataset> load_mnist(const std::string& dir, bool train = true,
                                          int64_t limit = -1, bool normalise = true);

}  // namespace gradus::data
