// gradus train --augment: data augmentation for the image task, run by the training loader
// (train.cpp) on the training device, and the loader's wait for data in the epoch figures.
#pragma once

#include <string>

#include "commands.h"
#include "gradus/data/data.h"

namespace gradus::cli {

// The transform of the training loader: empty without --augment. With it: a random crop with
// zero padding (--augment-padding; default 2 for 28x28 images, 4 for 32x32 and larger), a
// horizontal flip with p = 0.5 (Fashion-MNIST only: a mirrored digit is another digit or none)
// and the dataset's normalisation, which --augment moves from loading time to the device so that
// the padding is black (0 before normalising, as torchvision's RandomCrop + Normalize). The
// training set must then be loaded with normalise = false. `lead` prints a one-line summary.
data::BatchTransform augment_transform(const TrainOptions& o, const data::TensorDataset& train_set,
                                       bool lead);

// ", data wait 1.23 s (4.5%)": the epoch's loader wait, for the epoch line.
std::string data_wait_text(const data::LoaderStats& stats, double train_seconds);

}  // namespace gradus::cli
