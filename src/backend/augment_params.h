// The per-sample random parameters of Backend::augment_images, shared by the CPU kernel and the
// CUDA kernel (compiled by both compilers) so that both derive them with the same arithmetic.
//
// Sample n uses Philox block (counter rng.offset + n, key rng.seed), words w0..w3:
//   dy = w0 % (2 padding + 1), dx = w1 % (2 padding + 1)  (0 when padding is 0)
//   flip = uint_to_unit_float(w2) < (float)flip_p
// (w3 is unused.) The modulo's bias is below (2 padding + 1) / 2^32, far below anything a
// training run could notice.
#pragma once

#include <cstdint>

#include "gradus/core/random.h"

#if defined(__CUDACC__)
#define GRADUS_AUGMENT_HD __host__ __device__
#else
#define GRADUS_AUGMENT_HD
#endif

namespace gradus::backend {

struct CropFlip {
  int32_t dy;  // window origin in the padded image, in [0, 2 padding]
  int32_t dx;
  bool flip;
};

GRADUS_AUGMENT_HD inline CropFlip crop_flip_params(PhiloxState rng, int64_t sample, int64_t padding,
                                                   float flip_p) {
  const std::array<uint32_t, 4> w =
      philox4x32(rng.offset + static_cast<uint64_t>(sample), rng.seed);
  const uint32_t span = static_cast<uint32_t>(2 * padding + 1);
  return {static_cast<int32_t>(w[0] % span), static_cast<int32_t>(w[1] % span),
          uint_to_unit_float(w[2]) < flip_p};
}

}  // namespace gradus::backend
