// Host side of the image augmentation kernel (augment.cu): packs the shape, the random stream and
// the normalisation constants into the kernel's by-value argument.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"

namespace gradus::backend::cuda {

void CudaBackend::augment_images(const Tensor& x, const Tensor& out, const ImageAugmentArgs& args) {
  refuse_in_capture(
      "image augmentation (its crops and flips are drawn at each call; a replay would repeat "
      "those drawn at capture: augment the batch before copying it into the graph's input)");
  if (out.numel() == 0) return;
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  // Grid x counts planes; the kernel indexes a plane with 32-bit ints.
  GRADUS_CHECK(n * c <= 0x7fffffff && h * w <= 0x7fffffff, ValueError,
               "augment_images: cuda supports at most 2^31 - 1 planes of at most 2^31 - 1 "
               "elements, got [",
               n, ", ", c, ", ", h, ", ", w, "]");
  GRADUS_CHECK(args.mean.size() <= static_cast<size_t>(kMaxAugmentChannels), ValueError,
               "normalize: cuda supports at most ", kMaxAugmentChannels, " channels, got ",
               args.mean.size());
  AugmentLaunch a;
  a.x = x.raw_data();
  a.out = out.raw_data();
  a.dtype = x.dtype();
  a.n = n;
  a.c = c;
  a.h = h;
  a.w = w;
  a.padding = args.padding;
  a.flip_p = static_cast<float>(args.flip_p);
  a.rng = args.rng;
  a.normalise = !args.mean.empty();
  for (size_t k = 0; k < args.mean.size(); ++k) {
    a.mean[k] = args.mean[k];
    a.std[k] = args.std[k];
  }
  DeviceGuard guard(out);
  launch_augment_images(a, stream_of(out.device().index()));
}

}  // namespace gradus::backend::cuda
