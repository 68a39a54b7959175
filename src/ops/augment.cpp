// Image augmentation ops: argument checks, then one backend kernel (Backend::augment_images) that
// crops, flips and normalises in a single pass. No backward: these are data transforms, and
// recording none keeps them cheap inside the loader's worker threads.
#include <cmath>

#include "gradus/autograd.h"
#include "ops/common.h"

namespace gradus {

using ops::backend_of;

namespace {

void check_images(const char* op, const Tensor& x, bool normalising) {
  ops::check_defined(op, {&x});
  ops::check_dim(op, x, {4}, "image batch [N, C, H, W]");
  GRADUS_CHECK(!(x.requires_grad() && is_grad_enabled()), ValueError, op,
               ": is not differentiable (a data transform); call it on data that does not "
               "require grad, or under NoGradGuard");
  if (normalising) {
    ops::check_floating(op, x, "image batch");
  } else {
    GRADUS_CHECK(x.dtype() == DType::u8 || is_floating(x.dtype()), DTypeError, op,
                 ": expected u8 or a floating dtype, got ", dtype_name(x.dtype()));
  }
}

// mean / std with one value per channel (a single value applies to every channel).
void per_channel(const std::vector<double>& mean, const std::vector<double>& std, int64_t channels,
                 backend::ImageAugmentArgs& args) {
  const auto expand = [&](const std::vector<double>& v, const char* name) {
    GRADUS_CHECK(v.size() == 1 || static_cast<int64_t>(v.size()) == channels, ShapeError,
                 "normalize: ", name, " has ", v.size(), " values for ", channels,
                 " channels (expected ", channels, " or 1)");
    return v.size() == 1 ? std::vector<double>(static_cast<size_t>(channels), v[0]) : v;
  };
  args.mean = expand(mean, "mean");
  args.std = expand(std, "std");
  for (size_t c = 0; c < args.mean.size(); ++c) {
    GRADUS_CHECK(std::isfinite(args.mean[c]), ValueError, "normalize: mean[", c,
                 "] is not finite (", args.mean[c], ")");
    GRADUS_CHECK(std::isfinite(args.std[c]) && args.std[c] != 0.0, ValueError, "normalize: std[", c,
                 "] must be finite and non-zero, got ", args.std[c]);
  }
}

// One Philox block per sample.
PhiloxState draw(Generator* gen, int64_t samples) {
  Generator& g = gen != nullptr ? *gen : default_generator();
  return g.reserve(static_cast<uint64_t>(samples));
}

Tensor run(const Tensor& x, const backend::ImageAugmentArgs& args) {
  Tensor out = ops::new_empty(x.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) backend_of(x).augment_images(ops::contiguous_raw(x), out, args);
  return out;
}

void check_padding(const char* op, const Tensor& x, int64_t padding) {
  const int64_t limit = std::min(x.size(2), x.size(3));
  GRADUS_CHECK(padding >= 0 && padding <= limit, ValueError, op, ": padding must be in [0, ", limit,
               "] (min(H, W) of ", shape_str(x.sizes()),
               "; a larger one could crop a window of padding only), got ", padding);
}

void check_probability(const char* op, double p) {
  GRADUS_CHECK(p >= 0.0 && p <= 1.0, ValueError, op, ": probability p must be in [0, 1], got ", p);
}

}  // namespace

Tensor random_crop(const Tensor& x, int64_t padding, Generator* gen) {
  check_images("random_crop", x, false);
  check_padding("random_crop", x, padding);
  backend::ImageAugmentArgs args;
  args.padding = padding;
  args.rng = draw(gen, x.size(0));
  return run(x, args);
}

Tensor random_horizontal_flip(const Tensor& x, double p, Generator* gen) {
  check_images("random_horizontal_flip", x, false);
  check_probability("random_horizontal_flip", p);
  backend::ImageAugmentArgs args;
  args.flip_p = p;
  args.rng = draw(gen, x.size(0));
  return run(x, args);
}

Tensor normalize(const Tensor& x, const std::vector<double>& mean, const std::vector<double>& std) {
  check_images("normalize", x, true);
  backend::ImageAugmentArgs args;
  per_channel(mean, std, x.size(1), args);
  return run(x, args);
}

Tensor augment_images(const Tensor& x, const ImageAugmentOptions& o, Generator* gen) {
  const bool normalising = !o.mean.empty() || !o.std.empty();
  check_images("augment_images", x, normalising);
  check_padding("augment_images", x, o.crop_padding);
  check_probability("augment_images", o.flip_p);
  backend::ImageAugmentArgs args;
  args.padding = o.crop_padding;
  args.flip_p = o.flip_p;
  if (normalising) per_channel(o.mean, o.std, x.size(1), args);
  if (o.crop_padding > 0 || o.flip_p > 0) args.rng = draw(gen, x.size(0));
  return run(x, args);
}

}  // namespace gradus
