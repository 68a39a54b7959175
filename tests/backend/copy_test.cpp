// CPU copy / cast / fill / arange / host transfers.
#include <cmath>
#include <cstring>
#include <limits>

#include "backend_test_util.h"

namespace gradus::backend_test {
namespace {

constexpr DType kAll[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                          DType::i32, DType::i64, DType::u8,  DType::boolean};

// What a value becomes when stored in `dt` (PyTorch's cast rules), computed independently.
double cast_ref(double v, DType dt) {
  switch (dt) {
    case DType::f32:
      return static_cast<float>(v);
    case DType::f64:
      return v;
    case DType::f16:
      return static_cast<float>(Half(static_cast<float>(v)));
    case DType::bf16:
      return static_cast<float>(BFloat16(static_cast<float>(v)));
    case DType::i32:
    case DType::i64:
      return std::trunc(v);
    case DType::u8: {
      const double t = std::trunc(v);
      return t < 0 ? t + 256 : t;
    }
    case DType::boolean:
      return v != 0 ? 1 : 0;
  }
  return 0;
}

TEST(BackendCopy, CastsBetweenAllDTypes) {
  // Values every dtype can hold after truncation (u8 wraps negatives, bool maps non-zero to 1).
  const std::vector<double> values = {0, 1, 2.75, -3.5, 100.25, 7, 0.5, -1, 42};
  for (DType from : kAll) {
    const std::vector<double> src_vals = rounded(values, from);
    for (DType to : kAll) {
      Tensor src = make({3, 3}, src_vals, from);
      Tensor dst = poisoned({3, 3}, to);
      cpu().copy(src, dst);
      std::vector<double> expected(src_vals.size());
      for (size_t i = 0; i < expected.size(); ++i) expected[i] = cast_ref(src_vals[i], to);
      EXPECT_TRUE(close(read(dst), expected, 0, 0,
                        std::string(dtype_name(from)) + " -> " + dtype_name(to)));
    }
  }
}

TEST(BackendCopy, HalfAndBFloat16Rounding) {
  // Round to nearest even, overflow to inf, NaN preserved, subnormals kept.
  Tensor src =
      make({6}, {1.0 / 3.0, 70000.0, std::nan(""), -2.5e-7, 1.0 + 1.0 / 2048, 65504.0}, DType::f32);
  Tensor h = poisoned({6}, DType::f16);
  cpu().copy(src, h);
  const std::vector<double> hv = read(h);
  EXPECT_EQ(hv[0], 0.333251953125);
  EXPECT_TRUE(std::isinf(hv[1]));
  EXPECT_TRUE(std::isnan(hv[2]));
  EXPECT_NEAR(hv[3], -2.5e-7, 3e-8);  // f16 subnormal spacing is 6e-8
  EXPECT_EQ(hv[4], 1.0);              // tie rounds to even
  EXPECT_EQ(hv[5], 65504.0);
  Tensor b = poisoned({6}, DType::bf16);
  cpu().copy(src, b);
  const std::vector<double> bv = read(b);
  EXPECT_EQ(bv[0], 0.333984375);
  EXPECT_EQ(bv[1], 70144.0);
  EXPECT_TRUE(std::isnan(bv[2]));
  // Round trip f32 -> f16 -> f32 -> bf16 -> f32 of random values stays within half precision.
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const std::vector<double> r = uniform_values(5000, seed, -1000, 1000);
  Tensor x = make({5000}, r, DType::f32);
  for (DType half : {DType::f16, DType::bf16}) {
    Tensor hx = poisoned({5000}, half), back = poisoned({5000}, DType::f32);
    cpu().copy(x, hx);
    cpu().copy(hx, back);
    EXPECT_TRUE(close(read(back), read(x), half == DType::f16 ? 4.9e-4 : 3.9e-3, 0, "round trip"));
    // Converting back and forth again is exact.
    Tensor hx2 = poisoned({5000}, half);
    cpu().copy(back, hx2);
    EXPECT_TRUE(close(read(hx2), read(hx), 0, 0, "idempotent"));
  }
}

TEST(BackendCopy, FloatToIntegerEdgeCases) {
  Tensor src = make({5}, {std::nan(""), 1e20, -1e20, 300.7, -3.7}, DType::f32);
  Tensor i64 = poisoned({5}, DType::i64), i32 = poisoned({5}, DType::i32);
  Tensor u8 = poisoned({5}, DType::u8);
  cpu().copy(src, i64);
  cpu().copy(src, i32);
  cpu().copy(src, u8);
  // PyTorch (x86): NaN and out-of-range give the type's minimum; u8 wraps through int64.
  EXPECT_EQ(i64.data_ptr<int64_t>()[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(i64.data_ptr<int64_t>()[1], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(i32.data_ptr<int32_t>()[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(i32.data_ptr<int32_t>()[2], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(i64.data_ptr<int64_t>()[3], 300);
  EXPECT_EQ(i32.data_ptr<int32_t>()[4], -3);
  EXPECT_EQ(u8.data_ptr<uint8_t>()[3], 44);
  EXPECT_EQ(u8.data_ptr<uint8_t>()[4], 253);
}

TEST(BackendCopy, StridedBroadcastAndTransposedLayouts) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::u8}) {
    // Transposed [300, 200] view (parallel, > kGrain) into a contiguous tensor.
    const std::vector<double> v = rounded(uniform_values(200 * 300, seed, 0, 100), dt);
    Tensor base = make({200, 300}, v, dt);
    Tensor t = base.as_strided_raw({300, 200}, {1, 300}, 0);
    Tensor dst = poisoned({300, 200}, dt);
    cpu().copy(t, dst);
    EXPECT_TRUE(close(read(dst), read(t), 0, 0, "transpose"));
    // Same dtype into a strided destination (every other column of a wider tensor).
    Tensor wide = poisoned({300, 400}, dt);
    Tensor cols = wide.as_strided_raw({300, 200}, {400, 2}, 1);
    cpu().copy(t, cols);
    EXPECT_TRUE(close(read(cols), read(t), 0, 0, "strided dst"));
    EXPECT_TRUE(std::isnan(peek(wide, 0)) || !is_floating(dt));  // untouched column kept poison
    // Broadcast: a [7] row expanded to [5, 4, 7] with a cast to f64.
    Tensor row = make({7}, rounded(uniform_values(7, seed + 1, 0, 50), dt), dt);
    Tensor bsrc = row.as_strided_raw({5, 4, 7}, {0, 0, 1}, 0);
    Tensor bdst = poisoned({5, 4, 7}, DType::f64);
    cpu().copy(bsrc, bdst);
    std::vector<double> expected;
    for (int i = 0; i < 20; ++i) {
      for (double x : read(row)) expected.push_back(x);
    }
    EXPECT_TRUE(close(read(bdst), expected, 0, 0, "broadcast"));
    // A broadcast scalar (all strides 0).
    Tensor sdst = poisoned({3, 3}, dt);
    cpu().copy(row.as_strided_raw({3, 3}, {0, 0}, 2), sdst);
    EXPECT_TRUE(close(read(sdst), std::vector<double>(9, read(row)[2]), 0, 0, "scalar"));
  }
  // A batched transpose (permute of the last two axes) takes the tiled path per batch.
  {
    const std::vector<double> v = uniform_values(3 * 40 * 70, seed + 3, -1, 1);
    Tensor base3 = make({3, 40, 70}, v, DType::f32);
    Tensor t3 = base3.as_strided_raw({3, 70, 40}, {2800, 1, 70}, 0);
    Tensor d3 = poisoned({3, 70, 40}, DType::f32);
    cpu().copy(t3, d3);
    EXPECT_TRUE(close(read(d3), read(t3), 0, 0, "batched transpose"));
  }
  // Offset views (a slice starting mid-storage).
  Tensor base = make({10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, DType::i64);
  Tensor dst = poisoned({3}, DType::f32);
  cpu().copy(base.as_strided_raw({3}, {3}, 1), dst);
  EXPECT_TRUE(close(read(dst), {1, 4, 7}, 0, 0, "offset"));
}

TEST(BackendCopy, HostTransfersFillAndArange) {
  std::vector<float> host = {1.5f, -2.0f, 3.25f, 4.0f};
  Tensor t = poisoned({2, 2}, DType::f32);
  cpu().copy_from_host(host.data(), t);
  EXPECT_TRUE(close(read(t), {1.5, -2.0, 3.25, 4.0}, 0, 0));
  std::vector<float> back(4, 0.0f);
  cpu().copy_to_host(t, back.data());
  EXPECT_EQ(back, host);

  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64,
                   DType::u8, DType::boolean}) {
    Tensor f = poisoned({70000}, dt);
    cpu().fill(f, 3.0);
    EXPECT_TRUE(close(read(f), std::vector<double>(70000, dt == DType::boolean ? 1 : 3), 0, 0,
                      std::string("fill ") + dtype_name(dt)));
    // Fill through a strided view touches only the view.
    Tensor g = poisoned({4, 6}, dt);
    cpu().fill(g.as_strided_raw({4, 3}, {6, 2}, 0), 0.0);
    for (int64_t i = 0; i < 24; ++i) {
      const double v = peek(g, i);
      if ((i % 6) % 2 == 0) {
        EXPECT_EQ(v, 0.0);
      } else if (is_floating(dt)) {
        EXPECT_TRUE(std::isnan(v));
      }
    }
  }
  Tensor a = poisoned({5}, DType::f32);
  cpu().arange(a, -1.0, 0.5);
  EXPECT_TRUE(close(read(a), {-1.0, -0.5, 0.0, 0.5, 1.0}, 0, 0, "arange f32"));
  Tensor ai = poisoned({100000}, DType::i64);
  cpu().arange(ai, 10, 3);
  const int64_t* p = ai.data_ptr<int64_t>();
  for (int64_t i = 0; i < 100000; ++i) ASSERT_EQ(p[i], 10 + 3 * i);
  // Two roundings, never one FMA, in whichever copy of the backend the loader picked (the CUDA
  // kernel computes the same): 30 * 0.1 rounds to 3.0 exactly, so element 30 is 0, where a fused
  // multiply-add would leave 1.7e-16.
  Tensor ad = poisoned({40}, DType::f64);
  cpu().arange(ad, -3.0, 0.1);
  EXPECT_EQ(ad.data_ptr<double>()[30], 0.0);
  const volatile double step = 0.1;  // volatile: this file's compiler may not fuse either
  for (int64_t i = 0; i < 40; ++i) {
    const volatile double product = static_cast<double>(i) * step;
    EXPECT_EQ(ad.data_ptr<double>()[i], -3.0 + product) << "element " << i;
  }
}

}  // namespace
}  // namespace gradus::backend_test
