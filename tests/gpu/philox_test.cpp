// The random streams are bit-identical on the CPU and the GPU: same seed (and generator offset)
// -> the same bytes for rand, randn, randint, bernoulli and dropout (values and masks), for every
// dtype, sizes that are not multiples of 4 or of the block size, and draws that start mid-stream.
#include "gpu/gpu_test_util.h"

namespace gradus {
namespace {

using namespace gpu_test;

const Shape kShapes[] = {{1}, {3}, {4}, {5}, {1000003}, {17, 33}};

// The CPU's float formulas use fused multiply-adds where the target has them (vec::fmadd); the
// GPU always does. A CPU build without FMA (GRADUS_NATIVE=OFF on x86-64) rounds those steps
// twice, so its floats may differ in the last bit: then the streams are compared within 1 ulp.
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
constexpr bool kCpuFma = true;
#else
constexpr bool kCpuFma = false;
#endif

::testing::AssertionResult same_stream(const Tensor& g, const Tensor& c) {
  if (kCpuFma || !is_floating(c.dtype())) {
    if (bytes_of(g) == bytes_of(c)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "the bytes differ";
  }
  return close(g, c, c.dtype() == DType::f32 ? 4e-7 : tol(c.dtype()), 0.0);
}

TEST(PhiloxParity, UniformAllDtypes) {
  GRADUS_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const Shape& s : kShapes) {
      for (uint64_t offset : {uint64_t{0}, uint64_t{7}}) {
        const PhiloxState st{seed, offset};
        Tensor c = poisoned(s, t, Device::cpu()), g = poisoned(s, t, cuda0());
        cpu().uniform(c, st, -2.5, 3.0);
        gpu().uniform(g, st, -2.5, 3.0);
        EXPECT_EQ(bytes_of(g), bytes_of(c))
            << dtype_name(t) << " " << shape_str(s) << " seed " << seed << " offset " << offset;
      }
    }
  }
}

TEST(PhiloxParity, NormalAllDtypes) {
  GRADUS_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const Shape& s : kShapes) {
      const PhiloxState st{seed, 3};
      Tensor c = poisoned(s, t, Device::cpu()), g = poisoned(s, t, cuda0());
      cpu().normal(c, st, 0.25, 1.5);
      gpu().normal(g, st, 0.25, 1.5);
      EXPECT_EQ(bytes_of(g), bytes_of(c))
          << dtype_name(t) << " " << shape_str(s) << " seed " << seed;
    }
  }
}

TEST(PhiloxParity, NormalStatisticsAreSane) {
  GRADUS_REQUIRE_GPU();
  Generator gen(testing::fresh_seed());
  const Tensor x = randn({1 << 22}, {DType::f32, cuda0()}, &gen);
  const double m = mean(x).item();
  const double sd = gradus::std(x).item();
  EXPECT_NEAR(m, 0.0, 5e-3);
  EXPECT_NEAR(sd, 1.0, 5e-3);
}

TEST(PhiloxParity, IntegersNarrowAndWideRanges) {
  GRADUS_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  for (DType t : {DType::i64, DType::i32, DType::u8}) {
    for (auto [lo, hi] : {std::pair<double, double>{0, 10}, {-1000, 1000}, {0, 256}}) {
      if (t == DType::u8 && lo < 0) continue;
      Tensor c = poisoned({100003}, t, Device::cpu()), g = poisoned({100003}, t, cuda0());
      cpu().uniform(c, {seed, 5}, lo, hi);
      gpu().uniform(g, {seed, 5}, lo, hi);
      EXPECT_EQ(bytes_of(g), bytes_of(c)) << dtype_name(t) << " [" << lo << ", " << hi << ")";
    }
  }
  // Ranges wider than 2^32 take two words per element.
  Tensor c = poisoned({1001}, DType::i64, Device::cpu()), g = poisoned({1001}, DType::i64, cuda0());
  cpu().uniform(c, {seed, 1}, -1e12, 1e12);
  gpu().uniform(g, {seed, 1}, -1e12, 1e12);
  EXPECT_EQ(bytes_of(g), bytes_of(c));
}

TEST(PhiloxParity, OpsWithTheSameSeedMatch) {
  GRADUS_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  Generator gc(seed), gg(seed);
  for (int round = 0; round < 3; ++round) {  // the generators advance identically
    EXPECT_TRUE(same_stream(rand({999}, {DType::f32, cuda0()}, &gg),
                            rand({999}, {DType::f32, Device::cpu()}, &gc)));
    EXPECT_TRUE(same_stream(randn({31, 7}, {DType::bf16, cuda0()}, &gg),
                            randn({31, 7}, {DType::bf16, Device::cpu()}, &gc)));
    EXPECT_EQ(bytes_of(randint(-5, 17, {513}, {DType::i64, cuda0()}, &gg)),
              bytes_of(randint(-5, 17, {513}, {DType::i64, Device::cpu()}, &gc)));
  }
  EXPECT_EQ(gc.state().offset, gg.state().offset);
}

TEST(PhiloxParity, BernoulliWithBroadcastProbabilities) {
  GRADUS_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  const Tensor p = rnd({1, 257}, DType::f32, 0.0, 1.0);
  const Shape s = {129, 257};
  for (DType out_t : {DType::f32, DType::boolean, DType::bf16}) {
    Tensor c = poisoned(s, out_t, Device::cpu()), g = poisoned(s, out_t, cuda0());
    const Tensor pc = p.as_strided_raw(s, {0, 1}, p.offset());
    const Tensor pgpu = p.to(cuda0());
    cpu().bernoulli(c, pc, {seed, 11});
    gpu().bernoulli(g, pgpu.as_strided_raw(s, {0, 1}, pgpu.offset()), {seed, 11});
    EXPECT_EQ(bytes_of(g), bytes_of(c)) << dtype_name(out_t);
  }
}

TEST(PhiloxParity, DropoutValuesAndMask) {
  GRADUS_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    for (double p : {0.1, 0.5, 0.9}) {
      const Tensor x = rnd({1000003}, t);
      Tensor oc = poisoned(x.sizes(), t, Device::cpu()), og = poisoned(x.sizes(), t, cuda0());
      Tensor mc = empty(x.sizes(), {DType::u8, Device::cpu()});
      Tensor mg = empty(x.sizes(), {DType::u8, cuda0()});
      cpu().dropout(x, p, {seed, 2}, oc, mc);
      gpu().dropout(x.to(cuda0()), p, {seed, 2}, og, mg);
      EXPECT_EQ(bytes_of(mg), bytes_of(mc)) << dtype_name(t) << " p " << p;
      EXPECT_EQ(bytes_of(og), bytes_of(oc)) << dtype_name(t) << " p " << p;
    }
  }
}

TEST(PhiloxParity, NonContiguousOutputsFollowLogicalOrder) {
  GRADUS_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  const Tensor shape_src = rnd({37, 41}, DType::f32);
  Tensor c = strided_copy(shape_src, Device::cpu(), true);
  Tensor g = strided_copy(shape_src, cuda0(), true);
  cpu().normal(c, {seed, 0}, 0.0, 1.0);
  gpu().normal(g, {seed, 0}, 0.0, 1.0);
  EXPECT_TRUE(same_stream(g.contiguous(), c.contiguous()));
}

}  // namespace
}  // namespace gradus
