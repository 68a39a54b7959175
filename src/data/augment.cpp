// The loader's image augmentation transform (gradus/data/augment.h).
#include "gradus/data/augment.h"

namespace gradus::data {

BatchTransform image_augment(ImageAugmentOptions options) {
  return [options = std::move(options)](Example& batch, Generator& gen) {
    batch.input = augment_images(batch.input, options, &gen);
  };
}

}  // namespace gradus::data
