// Image augmentation ops (random_crop, random_horizontal_flip, normalize, augment_images) against
// plain loops that derive the per-sample parameters from Philox themselves, as documented in
// gradus/ops.h: sample n uses block (offset + n), crop offsets from words 0 and 1, the flip from
// word 2. CUDA results must equal the CPU's bit for bit.
#include <algorithm>
#include <random>

#include "gradus/core/cuda.h"
#include "support/test_util.h"

namespace gradus {
namespace {

struct Params {
  int64_t dy = 0, dx = 0;  // window origin in the padded image
  bool flip = false;
};

Params params_of(PhiloxState s, int64_t n, int64_t padding, double flip_p) {
  const auto w = philox4x32(s.offset + static_cast<uint64_t>(n), s.seed);
  const uint64_t span = static_cast<uint64_t>(2 * padding + 1);
  return {static_cast<int64_t>(w[0] % span), static_cast<int64_t>(w[1] % span),
          uint_to_unit_float(w[2]) < static_cast<float>(flip_p)};
}

// Crop (padding, zero fill) then flip, element by element, on the values of x as doubles.
std::vector<double> crop_flip_reference(const Tensor& x, int64_t padding, double flip_p,
                                        PhiloxState s) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> out(v.size());
  for (int64_t b = 0; b < n; ++b) {
    const Params p = params_of(s, b, padding, flip_p);
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t i = 0; i < h; ++i) {
        for (int64_t j = 0; j < w; ++j) {
          const int64_t col = p.flip ? w - 1 - j : j;  // column of the cropped window
          const int64_t y = i + p.dy - padding, xs = col + p.dx - padding;
          const bool inside = y >= 0 && y < h && xs >= 0 && xs < w;
          out[static_cast<size_t>(((b * c + ch) * h + i) * w + j)] =
              inside ? v[static_cast<size_t>(((b * c + ch) * h + y) * w + xs)] : 0.0;
        }
      }
    }
  }
  return out;
}

// (v - mean[c]) / std[c] in float (double for f64), rounded to the dtype once.
Tensor normalize_reference(const std::vector<double>& v, const Shape& shape, DType dtype,
                           const std::vector<double>& mean, const std::vector<double>& std) {
  const int64_t c = shape[1], plane = shape[2] * shape[3];
  std::vector<double> out(v.size());
  for (size_t k = 0; k < v.size(); ++k) {
    const size_t ch = static_cast<size_t>((static_cast<int64_t>(k) / plane) % c);
    if (dtype == DType::f64) {
      out[k] = (v[k] - mean[ch]) / std[ch];
    } else {
      out[k] = static_cast<double>((static_cast<float>(v[k]) - static_cast<float>(mean[ch])) /
                                   static_cast<float>(std[ch]));
    }
  }
  // f16/bf16: one rounding of the float result, as the kernels do.
  return tensor(out, shape, {dtype == DType::f64 ? DType::f64 : DType::f32}).to(dtype);
}

Tensor images(const Shape& shape, DType dtype, uint64_t seed) {
  if (dtype == DType::u8) return testing::random_tensor(shape, seed, 0, 256).to(DType::u8);
  return testing::random_tensor(shape, seed, -2, 2).to(dtype);
}

// Exact equality of values and shape.
::testing::AssertionResult same(const Tensor& a, const std::vector<double>& expected) {
  const std::vector<double> v = a.to_vector<double>();
  if (v.size() != expected.size()) return ::testing::AssertionFailure() << "size " << v.size();
  for (size_t k = 0; k < v.size(); ++k) {
    if (v[k] != expected[k]) {
      return ::testing::AssertionFailure()
             << "element " << k << ": " << v[k] << " vs expected " << expected[k];
    }
  }
  return ::testing::AssertionSuccess();
}
::testing::AssertionResult same(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) {
    return ::testing::AssertionFailure()
           << shape_str(a.sizes()) << " " << dtype_name(a.dtype()) << " vs " << shape_str(b.sizes())
           << " " << dtype_name(b.dtype());
  }
  return same(a.to(Device::cpu()), b.to(Device::cpu()).to_vector<double>());
}

class AugmentDTypes : public ::testing::TestWithParam<DType> {};

TEST_P(AugmentDTypes, RandomCropMatchesReference) {
  std::mt19937_64 rng(testing::fresh_seed());
  const int64_t n = 1 + static_cast<int64_t>(rng() % 9), c = 1 + static_cast<int64_t>(rng() % 3);
  const int64_t h = 1 + static_cast<int64_t>(rng() % 9), w = 1 + static_cast<int64_t>(rng() % 9);
  const int64_t padding = static_cast<int64_t>(rng() % static_cast<uint64_t>(std::min(h, w) + 1));
  SCOPED_TRACE(::testing::Message()
               << "[" << n << ", " << c << ", " << h << ", " << w << "] padding " << padding);
  const Tensor x = images({n, c, h, w}, GetParam(), rng());
  Generator gen(rng());
  const PhiloxState before = gen.state();
  const Tensor out = random_crop(x, padding, &gen);
  EXPECT_EQ(gen.state().offset, before.offset + static_cast<uint64_t>(n));  // one block a sample
  EXPECT_EQ(out.dtype(), x.dtype());
  EXPECT_TRUE(same(out, crop_flip_reference(x, padding, 0.0, before)));
}

TEST_P(AugmentDTypes, HorizontalFlipMatchesReference) {
  std::mt19937_64 rng(testing::fresh_seed());
  const Tensor x = images({64, 2, 5, 7}, GetParam(), rng());
  Generator gen(rng());
  const PhiloxState before = gen.state();
  const Tensor out = random_horizontal_flip(x, 0.5, &gen);
  EXPECT_TRUE(same(out, crop_flip_reference(x, 0, 0.5, before)));
  int flipped = 0;
  for (int64_t b = 0; b < 64; ++b) flipped += params_of(before, b, 0, 0.5).flip ? 1 : 0;
  EXPECT_GT(flipped, 8);  // both kinds occur (P(fail) < 1e-9)
  EXPECT_LT(flipped, 56);
}

TEST_P(AugmentDTypes, FusedEqualsTheSequenceAndTheReference) {
  if (GetParam() == DType::u8) GTEST_SKIP() << "normalisation needs a floating dtype";
  std::mt19937_64 rng(testing::fresh_seed());
  const Tensor x = images({12, 3, 8, 6}, GetParam(), rng());
  const ImageAugmentOptions o{
      .crop_padding = 3, .flip_p = 0.5, .mean = {0.25, -0.5, 1.0}, .std = {0.5, 2.0, 0.3}};
  Generator gen(rng());
  const PhiloxState before = gen.state();
  const Tensor fused = augment_images(x, o, &gen);
  EXPECT_EQ(gen.state().offset, before.offset + 12);
  const Tensor expected = normalize_reference(crop_flip_reference(x, 3, 0.5, before), x.sizes(),
                                              x.dtype(), o.mean, o.std);
  EXPECT_TRUE(same(fused, expected));
  // The three ops with the crop and the flip drawing from the same state.
  Generator g1, g2;
  g1.set_state(before);
  g2.set_state(before);
  const Tensor seq =
      normalize(random_horizontal_flip(random_crop(x, 3, &g1), 0.5, &g2), o.mean, o.std);
  EXPECT_TRUE(same(fused, seq));
}

TEST_P(AugmentDTypes, NormalizeMatchesReference) {
  if (GetParam() == DType::u8) GTEST_SKIP() << "normalisation needs a floating dtype";
  std::mt19937_64 rng(testing::fresh_seed());
  const Tensor x = images({3, 4, 5, 5}, GetParam(), rng());
  const std::vector<double> mean = {0.1, 0.2, -0.3, 0.4}, std = {0.7, 1.3, 0.25, 3.0};
  EXPECT_TRUE(same(normalize(x, mean, std),
                   normalize_reference(x.to_vector<double>(), x.sizes(), x.dtype(), mean, std)));
  // One value for every channel.
  EXPECT_TRUE(same(normalize(x, {0.5}, {2.0}),
                   normalize_reference(x.to_vector<double>(), x.sizes(), x.dtype(),
                                       {0.5, 0.5, 0.5, 0.5}, {2.0, 2.0, 2.0, 2.0})));
}

INSTANTIATE_TEST_SUITE_P(All, AugmentDTypes,
                         ::testing::Values(DType::f32, DType::f64, DType::f16, DType::bf16,
                                           DType::u8),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Augment, DeterministicFromTheSeed) {
  const Tensor x = images({16, 3, 10, 10}, DType::f32, testing::fresh_seed());
  const ImageAugmentOptions o{.crop_padding = 4, .flip_p = 0.5};
  Generator a(42), b(42), c(43);
  const Tensor first = augment_images(x, o, &a);
  EXPECT_TRUE(same(first, augment_images(x, o, &b)));
  EXPECT_FALSE(same(first, augment_images(x, o, &c)));
  // The default generator follows manual_seed.
  manual_seed(7);
  const Tensor d1 = augment_images(x, o);
  manual_seed(7);
  EXPECT_TRUE(same(d1, augment_images(x, o)));
}

TEST(Augment, EdgeProbabilitiesAndZeroPadding) {
  const Tensor x = images({5, 2, 4, 6}, DType::f32, testing::fresh_seed());
  Generator gen(1);
  EXPECT_TRUE(same(random_crop(x, 0, &gen), x));
  EXPECT_TRUE(same(random_horizontal_flip(x, 0.0, &gen), x));
  std::vector<double> mirrored = x.to_vector<double>();
  for (size_t row = 0; row < mirrored.size(); row += 6) {
    std::reverse(mirrored.begin() + static_cast<std::ptrdiff_t>(row),
                 mirrored.begin() + static_cast<std::ptrdiff_t>(row + 6));
  }
  EXPECT_TRUE(same(random_horizontal_flip(x, 1.0, &gen), mirrored));
}

TEST(Augment, NonContiguousInput) {
  const Tensor base = images({6, 6, 3, 5}, DType::f32, testing::fresh_seed());
  const Tensor x = base.transpose(1, 2);  // [6, 3, 6, 5], not contiguous
  ASSERT_FALSE(x.is_contiguous());
  Generator a(3), b(3);
  EXPECT_TRUE(same(augment_images(x, {.crop_padding = 2, .flip_p = 0.5}, &a),
                   augment_images(x.contiguous(), {.crop_padding = 2, .flip_p = 0.5}, &b)));
}

TEST(Augment, Errors) {
  const Tensor x = images({2, 3, 8, 8}, DType::f32, 1);
  EXPECT_THROW(random_crop(zeros({3, 8, 8}), 1), ShapeError);
  EXPECT_THROW(random_crop(zeros({2, 3, 8, 8}, {.dtype = DType::i64}), 1), DTypeError);
  EXPECT_THROW(random_crop(x, -1), ValueError);
  try {
    random_crop(images({2, 3, 8, 5}, DType::f32, 1), 6);
    FAIL() << "padding above min(H, W) was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("padding must be in [0, 5]"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(random_horizontal_flip(x, 1.5), ValueError);
  EXPECT_THROW(random_horizontal_flip(x, -0.1), ValueError);
  EXPECT_THROW(normalize(x.to(DType::u8), {0.5}, {0.5}), DTypeError);
  EXPECT_THROW(normalize(x, {0.1, 0.2}, {1, 1, 1}), ShapeError);
  EXPECT_THROW(normalize(x, {0.1, 0.2, 0.3}, {1, 0, 1}), ValueError);
  EXPECT_THROW(augment_images(x, {.mean = {0.5}}), ShapeError);  // std missing
  EXPECT_THROW(augment_images(x.to(DType::u8), {.mean = {0.5}, .std = {0.5}}), DTypeError);
  Tensor leaf = x.clone();
  leaf.set_requires_grad(true);
  try {
    random_crop(leaf, 1);
    FAIL() << "an input requiring grad was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("not differentiable"), std::string::npos) << e.what();
  }
  NoGradGuard no_grad;
  EXPECT_NO_THROW(random_crop(leaf, 1));
}

TEST(AugmentCuda, MatchesCpuBitForBit) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device: the CUDA kernel is not checked";
  std::mt19937_64 rng(testing::fresh_seed());
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::u8}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = images({9, 3, 13, 11}, dtype, rng());
    const uint64_t seed = rng();
    Generator a(seed), b(seed);
    EXPECT_TRUE(same(random_crop(x.to(Device::cuda()), 5, &a), random_crop(x, 5, &b)));
    EXPECT_TRUE(same(random_horizontal_flip(x.to(Device::cuda()), 0.5, &a),
                     random_horizontal_flip(x, 0.5, &b)));
    if (dtype == DType::u8) continue;
    const ImageAugmentOptions o{
        .crop_padding = 4, .flip_p = 0.5, .mean = {0.2, 0.3, 0.4}, .std = {0.5, 0.6, 0.7}};
    EXPECT_TRUE(same(augment_images(x.to(Device::cuda()), o, &a), augment_images(x, o, &b)));
  }
}

}  // namespace
}  // namespace gradus
