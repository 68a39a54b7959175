// Core tensor behaviour: metadata, views sharing storage, dtypes and casts, devices, errors,
// printing and the Philox generator state.
#include <gtest/gtest.h>

#include <bit>
#include <functional>
#include <random>

#include "support/test_util.h"

namespace gradus {
namespace {

using testing::all_close;
using testing::fresh_seed;
using testing::random_tensor;

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64,
                  DType::u8, DType::boolean}) {
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  }
  EXPECT_EQ(dtype_from_name("bf16"), DType::bf16);
  EXPECT_THROW(dtype_from_name("float128"), DTypeError);
}

TEST(DType, PromotionFollowsPyTorch) {
  EXPECT_EQ(promote_types(DType::i64, DType::f16), DType::f16);
  EXPECT_EQ(promote_types(DType::f32, DType::f64), DType::f64);
  EXPECT_EQ(promote_types(DType::f16, DType::bf16), DType::f32);
  EXPECT_EQ(promote_types(DType::u8, DType::i32), DType::i32);
  EXPECT_EQ(promote_types(DType::boolean, DType::u8), DType::u8);
}

TEST(DType, HalfAndBFloat16RoundToNearestEven) {
  // Exhaustive over all finite halves: float -> half -> float is the identity.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    if (((h >> 10) & 0x1f) == 0x1f) continue;  // inf/nan
    const float f = half_to_float(h);
    EXPECT_EQ(float_to_half(f), h) << "half bits " << bits;
  }
  EXPECT_EQ(float(Half(65520.0f)), INFINITY);        // rounds past the largest half
  EXPECT_EQ(float(Half(1.0f + 1.0f / 2048)), 1.0f);  // tie goes to even
  EXPECT_EQ(float(BFloat16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_EQ(float(BFloat16(3.0f)), 3.0f);
  EXPECT_TRUE(std::isnan(float(BFloat16(NAN))));
}

TEST(DType, HardwareHalfConversionsMatchThePortableOnes) {
  // half -> float: every bit pattern (NaNs only need to stay NaN).
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    const float fast = half_to_float(h), portable = half_to_float_portable(h);
    if (std::isnan(portable)) {
      EXPECT_TRUE(std::isnan(fast)) << bits;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(fast), std::bit_cast<uint32_t>(portable)) << bits;
    }
  }
  // float -> half: fresh random floats over the whole half range and beyond, plus the edges.
  std::mt19937 rng(static_cast<uint32_t>(fresh_seed()));
  std::vector<float> floats = {0.0f,     -0.0f,   65504.0f, 65519.99f, 65520.0f, 5.96e-8f, 2.98e-8f,
                               2.99e-8f, 6.1e-5f, INFINITY, -INFINITY, 1e30f,    -1e-30f};
  for (int i = 0; i < 200000; ++i) {
    floats.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  }
  for (float f : floats) {
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_half(f), float_to_half_portable(f)) << f;
  }
}

TEST(Tensor, ViewsShareStorage) {
  Tensor x = random_tensor({4, 6}, fresh_seed(), -1, 1, DType::f32);
  Tensor v = x.view({2, 12});
  Tensor t = x.t();
  Tensor s = x.slice(1, 1, 5, 2);
  EXPECT_EQ(v.impl()->storage(), x.impl()->storage());
  EXPECT_EQ(t.impl()->storage(), x.impl()->storage());
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(s.sizes(), (Shape{4, 2}));
  EXPECT_EQ(s.strides(), (Shape{6, 2}));
  const auto xv = x.to_vector<float>();
  const auto sv = s.to_vector<float>();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(sv[i * 2], xv[i * 6 + 1]);
    EXPECT_EQ(sv[i * 2 + 1], xv[i * 6 + 3]);
  }
  {
    NoGradGuard ng;
    s.fill_(7.0);
  }
  EXPECT_EQ(x.to_vector<float>()[1], 7.0f);  // written through the view
  EXPECT_EQ(x.to_vector<float>()[2], xv[2]);
}

TEST(Tensor, ReshapeCopiesOnlyWhenNeeded) {
  Tensor x = random_tensor({3, 4}, fresh_seed(), -1, 1, DType::f32);
  EXPECT_EQ(x.reshape({12}).impl()->storage(), x.impl()->storage());
  Tensor xt = x.t();
  EXPECT_THROW(xt.view({12}), ShapeError);
  Tensor r = xt.reshape({12});
  EXPECT_NE(r.impl()->storage(), x.impl()->storage());
  const auto xv = x.to_vector<float>(), rv = r.to_vector<float>();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(rv[i * 3 + j], xv[j * 4 + i]);
  }
  EXPECT_EQ(x.reshape({-1, 2}).sizes(), (Shape{6, 2}));
  EXPECT_THROW(x.reshape({5, -1}), ShapeError);
}

TEST(Tensor, ExpandSqueezeUnsqueezePermute) {
  Tensor x = random_tensor({3, 1}, fresh_seed(), -1, 1, DType::f64);
  Tensor e = x.expand({2, 3, 4});
  EXPECT_EQ(e.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides()[0], 0);
  EXPECT_EQ(e.strides()[2], 0);
  EXPECT_THROW(x.expand({3, 2, 4}), ShapeError);
  EXPECT_EQ(x.unsqueeze(0).sizes(), (Shape{1, 3, 1}));
  EXPECT_EQ(x.squeeze().sizes(), (Shape{3}));
  EXPECT_EQ(x.squeeze(0).sizes(), (Shape{3, 1}));
  Tensor p = random_tensor({2, 3, 4}, fresh_seed()).permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), (Shape{4, 2, 3}));
  EXPECT_THROW(p.permute({0, 0, 1}), ValueError);
  EXPECT_THROW(p.permute({0, 1}), ShapeError);
}

TEST(Tensor, CastsBetweenAllDTypes) {
  const std::vector<double> values = {-3.0, -1.0, 0.0, 1.0, 2.0, 100.0};
  const DType all[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                       DType::i32, DType::i64, DType::u8,  DType::boolean};
  for (DType from : all) {
    for (DType to : all) {
      Tensor a = tensor(values, {6}, {.dtype = from});
      Tensor b = a.to(to);
      ASSERT_EQ(b.dtype(), to);
      const auto got = b.to_vector<double>();
      const auto src = a.to_vector<double>();
      for (size_t i = 0; i < values.size(); ++i) {
        double expected = src[i];
        if (to == DType::boolean) expected = expected != 0 ? 1 : 0;
        if (to == DType::u8)
          expected = static_cast<double>(static_cast<uint8_t>(static_cast<int64_t>(expected)));
        EXPECT_EQ(got[i], expected) << dtype_name(from) << " -> " << dtype_name(to) << " at " << i;
      }
    }
  }
}

TEST(Tensor, ErrorsNameTheOpAndShapes) {
  Tensor a = random_tensor({2, 3}, fresh_seed(), -1, 1, DType::f32);
  Tensor b = random_tensor({4, 5}, fresh_seed(), -1, 1, DType::f32);
  try {
    add(a, b);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[4, 5]"), std::string::npos);
  }
  EXPECT_THROW(a.size(2), IndexError);
  EXPECT_THROW(a.data_ptr<double>(), DTypeError);
  EXPECT_THROW(a.item(), ValueError);
  EXPECT_THROW(empty({2, -1}), ShapeError);
  EXPECT_THROW(Device::parse("tpu"), ValueError);
  EXPECT_THROW(a.narrow(1, 2, 5), IndexError);
}

TEST(Device, ParseAndBest) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  EXPECT_EQ(Device::parse("auto"), Device::best());
  if (cuda_device_count() == 0) {
    EXPECT_EQ(Device::best(), Device::cpu());
    // Asking for a GPU that is not there is a clear error, not a crash.
    EXPECT_THROW(zeros({2}, {.device = Device::cuda(0)}), Error);
  }
}

TEST(Tensor, PrintsLikePyTorch) {
  EXPECT_EQ(tensor({1.0, 2.5, -3.0}).str(), "tensor([ 1.0000,  2.5000, -3.0000])");
  EXPECT_EQ(tensor({1.0, 2.0}, {2, 1}).str(), "tensor([[1.],\n        [2.]])");
  EXPECT_EQ(from_vector<int64_t>({1, 20}, {2}, {.dtype = DType::i64}).str(), "tensor([ 1, 20])");
  EXPECT_EQ(scalar_tensor(0.5, {.dtype = DType::f64}).str(), "tensor(0.5000, dtype=float64)");
  Tensor big = zeros({2000});
  EXPECT_NE(big.str().find("..."), std::string::npos);
}

TEST(Random, SameSeedSameNumbersAndStateIsSeedPlusOffset) {
  const uint64_t seed = fresh_seed();
  Generator g1(seed), g2(seed);
  Tensor a = randn({1000}, {}, &g1);
  Tensor b = randn({1000}, {}, &g2);
  EXPECT_TRUE(all_close(a, b, 0, 0));
  EXPECT_EQ(g1.state().offset, 250u);
  Tensor c = randn({1000}, {}, &g1);
  EXPECT_FALSE(all_close(a, c, 0, 0));
  // Restoring (seed, offset) replays the stream exactly: checkpointing the RNG is two numbers.
  g2.set_state({seed, 250});
  EXPECT_TRUE(all_close(randn({1000}, {}, &g2), c, 0, 0));
  // Moments of 100k normals and uniforms.
  Tensor n = randn({100000}, {.dtype = DType::f64}, &g1);
  EXPECT_NEAR(mean(n).item(), 0.0, 0.02);
  EXPECT_NEAR(std(n).item(), 1.0, 0.02);
  Tensor u = rand({100000}, {.dtype = DType::f64}, &g1);
  EXPECT_NEAR(mean(u).item(), 0.5, 0.01);
  EXPECT_GE(min(u).item(), 0.0);
  EXPECT_LT(max(u).item(), 1.0);
  Tensor perm = randperm(100, {.dtype = DType::i64}, &g1);
  auto pv = perm.to_vector<int64_t>();
  std::sort(pv.begin(), pv.end());
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(pv[i], i);
  Tensor ri = randint(-3, 5, {10000}, {.dtype = DType::i64}, &g1);
  EXPECT_EQ(min(ri).item(), -3);
  EXPECT_EQ(max(ri).item(), 4);
}

// Reading an undefined tensor (p.grad() before any backward) is a clear error, not a crash.
TEST(Tensor, UndefinedTensorAccessorsThrow) {
  const Tensor t;
  EXPECT_FALSE(t.defined());
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no ValueError");
  };
  for (const std::string& m :
       {message([&] { (void)t.shape(); }), message([&] { (void)t.sizes(); }),
        message([&] { (void)t.dim(); }), message([&] { (void)t.numel(); }),
        message([&] { (void)t.dtype(); }), message([&] { (void)t.device(); }),
        message([&] { (void)t.size(0); }), message([&] { (void)t.raw_data(); }),
        message([&] { (void)t.is_contiguous(); }), message([&] { (void)t.strides(); })}) {
    EXPECT_NE(m.find("undefined"), std::string::npos) << m;
  }
  Tensor p = zeros({3}).set_requires_grad();
  EXPECT_THROW((void)p.grad().shape(), ValueError);
}

}  // namespace
}  // namespace gradus

namespace gradus {
namespace {

// copy_ between two views of one storage whose elements overlap reads the source as it was
// before the copy, like a copy through a temporary, on every device: a shift by one element
// either way (the backends' memcpy path) and a square matrix onto its own transpose (the strided
// kernels). Without the snapshot, the shifted copy smears and the transpose mixes old and new.
TEST(TensorCopy, OverlappingViewsOfOneStorageReadTheSourceFirst) {
  std::vector<Device> devices = {Device::cpu()};
  if (cuda_device_count() > 0) devices.push_back(Device::cuda(0));
  for (const Device& device : devices) {
    SCOPED_TRACE(device.str());
    const int64_t n = 100003;
    const Tensor base = random_tensor({n}, fresh_seed(), -1, 1, DType::f32).to(device);
    const std::vector<float> before = base.to_vector<float>();
    Tensor right = base.clone();
    right.slice(0, 1, n).copy_(right.slice(0, 0, n - 1));
    Tensor left = base.clone();
    left.slice(0, 0, n - 1).copy_(left.slice(0, 1, n));
    const std::vector<float> r = right.to_vector<float>(), l = left.to_vector<float>();
    for (int64_t i = 1; i < n; ++i) ASSERT_EQ(r[i], before[i - 1]) << "shift right, element " << i;
    for (int64_t i = 0; i + 1 < n; ++i)
      ASSERT_EQ(l[i], before[i + 1]) << "shift left, element " << i;

    const int64_t m = 301;
    const Tensor square = random_tensor({m, m}, fresh_seed(), -1, 1, DType::f32).to(device);
    const std::vector<float> sq = square.to_vector<float>();
    Tensor t = square.clone();
    t.copy_(t.transpose(0, 1));
    const std::vector<float> got = t.to_vector<float>();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        ASSERT_EQ(got[i * m + j], sq[j * m + i]) << "transpose, element " << i << ", " << j;
      }
    }
  }
}

}  // namespace
}  // namespace gradus
