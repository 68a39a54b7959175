// Data augmentation in the loader: a BatchTransform that crops, flips and normalises each image
// batch with gradus::augment_images on the batch's device (the GPU for a CUDA target).
//
//   data::DataLoader loader(train_set, {.batch_size = 128, .shuffle = true, .seed = 1,
//                                       .device = Device::best(), .num_workers = 2,
//                                       .transform = data::image_augment({.crop_padding = 2,
//                                                                         .flip_p = 0.5})});
//
// The parameters of every example depend only on (seed, epoch, batch, position in the global
// batch): see transform_stream() in dataloader.h.
#pragma once

#include "gradus/data/dataloader.h"
#include "gradus/ops.h"

namespace gradus::data {

// input [N, C, H, W] -> augment_images(input, options); the target is left as it is.
BatchTransform image_augment(ImageAugmentOptions options);

}  // namespace gradus::data
