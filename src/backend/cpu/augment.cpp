// Image augmentation (Backend::augment_images): random crop with zero padding, horizontal flip and
// per-channel normalisation of [N, C, H, W] in one pass. The CUDA twin is augment.cu; both take
// the per-sample parameters from augment_params.h and normalise as
//   out = convert<T>((v - (C)mean[c]) / (C)std[c])    (C = float, or double for f64)
// with one subtraction and one IEEE division, so the results are bit-identical.
#include <algorithm>

#include "backend/augment_params.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/loops.h"

namespace gradus::backend::cpu {
namespace {

template <typename T>
using compute_of = std::conditional_t<std::is_same_v<T, double>, double, float>;

// One [H, W] plane. The window's row i reads source row i + dy - padding; output column j reads
// source column jj + dx - padding with jj = flip ? W - 1 - j : j. Outside the source: zero.
template <typename T, typename F>
void augment_plane(const T* src, T* dst, int64_t h, int64_t w, int64_t padding, CropFlip p,
                   const F& value, T zero) {
  const int64_t shift = p.dx - padding;
  // jj in [lo, hi) reads inside the image.
  const int64_t lo = std::clamp<int64_t>(-shift, 0, w), hi = std::clamp<int64_t>(w - shift, lo, w);
  for (int64_t i = 0; i < h; ++i) {
    T* out = dst + i * w;
    const int64_t y = i + p.dy - padding;
    if (y < 0 || y >= h) {
      std::fill(out, out + w, zero);
      continue;
    }
    const T* row = src + y * w;  // row[jj + shift] is the source pixel of jj
    if (!p.flip) {
      std::fill(out, out + lo, zero);
      for (int64_t j = lo; j < hi; ++j) out[j] = value(row[j + shift]);
      std::fill(out + hi, out + w, zero);
    } else {
      // Column j holds jj = w - 1 - j: inside for j in [w - hi, w - lo).
      std::fill(out, out + (w - hi), zero);
      for (int64_t j = w - hi; j < w - lo; ++j) out[j] = value(row[w - 1 - j + shift]);
      std::fill(out + (w - lo), out + w, zero);
    }
  }
}

template <typename T>
void augment_typed(const Tensor& x, const Tensor& out, const ImageAugmentArgs& args) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t plane = h * w;
  const T* src = x.data_ptr<T>();
  T* dst = out.data_ptr<T>();
  const bool normalise = !args.mean.empty();
  const float flip_p = static_cast<float>(args.flip_p);
  parallel_for(n * c, std::max<int64_t>(1, kGrain / std::max<int64_t>(plane, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t pc = begin; pc < end; ++pc) {
                   const int64_t sample = pc / c, ch = pc % c;
                   const CropFlip p = crop_flip_params(args.rng, sample, args.padding, flip_p);
                   const T* s = src + pc * plane;
                   T* d = dst + pc * plane;
                   if constexpr (std::is_integral_v<T>) {
                     augment_plane(
                         s, d, h, w, args.padding, p, [](T v) { return v; }, T(0));
                   } else if (!normalise) {
                     augment_plane(
                         s, d, h, w, args.padding, p, [](T v) { return v; }, convert<T>(0.0f));
                   } else {
                     using C = compute_of<T>;
                     const C m = static_cast<C>(args.mean[static_cast<size_t>(ch)]);
                     const C sd = static_cast<C>(args.std[static_cast<size_t>(ch)]);
                     const auto f = [m, sd](T v) { return convert<T>((convert<C>(v) - m) / sd); };
                     augment_plane(s, d, h, w, args.padding, p, f, convert<T>((C(0) - m) / sd));
                   }
                 }
               });
}

}  // namespace

void CpuBackend::augment_images(const Tensor& x, const Tensor& out, const ImageAugmentArgs& args) {
  if (out.numel() == 0) return;
  switch (x.dtype()) {
    case DType::u8:
      return augment_typed<uint8_t>(x, out, args);
    case DType::f32:
      return augment_typed<float>(x, out, args);
    case DType::f64:
      return augment_typed<double>(x, out, args);
    case DType::f16:
      return augment_typed<Half>(x, out, args);
    case DType::bf16:
      return augment_typed<BFloat16>(x, out, args);
    default:
      throw DTypeError(
          std::string("augment_images: cpu kernel expects u8 or a floating dtype, got ") +
          dtype_name(x.dtype()));
  }
}

}  // namespace gradus::backend::cpu
