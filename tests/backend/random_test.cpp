// Philox stream and the CPU random kernels: Random123 known answers, the documented per-element
// formulas recomputed independently, statistics, and independence from the thread count and the
// output layout.
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>

#include "backend_test_util.h"
#include "gradus/core/random.h"
#include "gradus/core/random_math.h"
#include "gradus/core/threads.h"

namespace gradus::backend_test {
namespace {

// An independent Philox4x32-10 with all four counter words (written from the Random123 spec).
std::array<uint32_t, 4> philox_ref(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    const uint64_t p0 = uint64_t{0xD2511F53u} * c[0], p1 = uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
  }
  return c;
}

TEST(BackendRandom, PhiloxKnownAnswers) {
  // Random123 kat_vectors for philox4x32-10.
  EXPECT_EQ(philox_ref({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(
      philox_ref({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
      (std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(
      philox_ref({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
      (std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
  // gradus's philox4x32(counter, key): counter = (lo, hi, 0, 0), key = (lo, hi).
  EXPECT_EQ(philox4x32(0, 0),
            (std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  const uint64_t seed = testing::fresh_seed();
  for (uint64_t i = 0; i < 100; ++i) {
    const uint64_t ctr = seed * 31 + i * 0x9E3779B97F4A7C15ull, key = seed ^ (i << 40);
    EXPECT_EQ(philox4x32(ctr, key),
              philox_ref({static_cast<uint32_t>(ctr), static_cast<uint32_t>(ctr >> 32), 0, 0},
                         {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)}));
  }
}

uint32_t word(PhiloxState s, int64_t i) {
  return philox4x32(s.offset + static_cast<uint64_t>(i) / 4, s.seed)[static_cast<size_t>(i % 4)];
}
float unit(uint32_t w) {
  return static_cast<float>(w >> 8) / 16777216.0f;
}

// The documented Box-Muller pair for element i.
float normal_ref(PhiloxState s, int64_t i) {
  const auto w = philox4x32(s.offset + static_cast<uint64_t>(i) / 4, s.seed);
  const size_t pair = static_cast<size_t>(i % 4) / 2;
  const float u1 = 1.0f - unit(w[2 * pair]), u2 = unit(w[2 * pair + 1]);
  const float rad = std::sqrt(-2.0f * std::log(u1));
  const float angle = 2.0f * std::numbers::pi_v<float> * u2;
  return i % 2 == 0 ? rad * std::cos(angle) : rad * std::sin(angle);
}

PhiloxState fresh_state() {
  const uint64_t s = testing::fresh_seed();
  return {s, s >> 20};
}

TEST(BackendRandom, UniformMatchesStreamAndStatistics) {
  const PhiloxState st = fresh_state();
  SCOPED_TRACE(st.seed);
  const int64_t n = 1 << 20;
  Tensor out = poisoned({n}, DType::f32);
  cpu().uniform(out, st, -2.0, 3.0);
  const float* p = out.data_ptr<float>();
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float expected = std::fma(unit(word(st, i)), 5.0f, -2.0f);
    ASSERT_EQ(p[i], expected) << i;
    ASSERT_TRUE(p[i] >= -2.0f && p[i] < 3.0f);
    sum += p[i];
    sq += (p[i] - 0.5) * (p[i] - 0.5);
  }
  // mean 0.5 (sd of the mean 5/sqrt(12 n)), variance 25/12.
  EXPECT_NEAR(sum / n, 0.5, 6 * 5.0 / std::sqrt(12.0 * n));
  EXPECT_NEAR(sq / n, 25.0 / 12.0, 0.02);
  // f64 output uses the full 32-bit word.
  Tensor d = poisoned({1000}, DType::f64);
  cpu().uniform(d, st, 0.0, 1.0);
  for (int64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(d.data_ptr<double>()[i], static_cast<double>(word(st, i)) * 0x1p-32);
  }
  // bf16 rounds the float value once.
  Tensor h = poisoned({100}, DType::bf16);
  cpu().uniform(h, st, -2.0, 3.0);
  for (int64_t i = 0; i < 100; ++i) {
    ASSERT_EQ(peek(h, i), static_cast<float>(BFloat16(p[i])));
  }
}

TEST(BackendRandom, IndependentOfThreadsAndLayout) {
  const PhiloxState st = fresh_state();
  SCOPED_TRACE(st.seed);
  const int threads = get_num_threads();
  const int64_t n = 300007;
  for (int which = 0; which < 3; ++which) {
    Tensor a = poisoned({n}, DType::f32), b = poisoned({n}, DType::f32);
    auto draw = [&](const Tensor& t) {
      if (which == 0) cpu().uniform(t, st, 0, 1);
      if (which == 1) cpu().normal(t, st, 1.5, 2.0);
      if (which == 2) {
        Tensor mask = poisoned({n}, DType::u8);
        Tensor x = make({n}, std::vector<double>(static_cast<size_t>(n), 1.0), DType::f32);
        cpu().dropout(x, 0.3, st, t, mask);
      }
    };
    set_num_threads(1);
    draw(a);
    set_num_threads(2);
    draw(b);
    set_num_threads(threads);
    EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(n) * 4)) << which;
  }
  // A transposed output gets element i (row-major logical order) from word i.
  Tensor base = poisoned({40, 30}, DType::f32);
  Tensor t = base.as_strided_raw({30, 40}, {1, 30}, 0);
  cpu().uniform(t, st, 0, 1);
  const std::vector<double> got = read(t);
  for (int64_t i = 0; i < 1200; ++i) {
    ASSERT_EQ(got[static_cast<size_t>(i)], unit(word(st, i))) << i;
  }
}

TEST(BackendRandom, NormalMatchesBoxMullerAndStatistics) {
  const PhiloxState st = fresh_state();
  SCOPED_TRACE(st.seed);
  const int64_t n = 1 << 20;
  Tensor out = poisoned({n}, DType::f32);
  cpu().normal(out, st, 1.5, 2.0);
  const float* p = out.data_ptr<float>();
  double sum = 0, sq = 0, q4 = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i < 4096) {
      ASSERT_NEAR(p[i], std::fma(normal_ref(st, i), 2.0f, 1.5f), 1e-5 * (1 + std::abs(p[i]))) << i;
    }
    ASSERT_TRUE(std::isfinite(p[i]));
    const double z = (p[i] - 1.5) / 2.0;
    sum += z;
    sq += z * z;
    q4 += z * z * z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 6 / std::sqrt(static_cast<double>(n)));
  EXPECT_NEAR(sq / n, 1.0, 6 * std::sqrt(2.0 / n));
  EXPECT_NEAR(q4 / n, 3.0, 6 * std::sqrt(96.0 / n));  // normal kurtosis
  // Odd sizes and f64 / f16 outputs draw the same values.
  Tensor d = poisoned({7}, DType::f64);
  cpu().normal(d, st, 1.5, 2.0);
  for (int64_t i = 0; i < 7; ++i) {
    EXPECT_NEAR(d.data_ptr<double>()[i], p[i], 1e-6 * (1 + std::abs(p[i])));
  }
}

// The normals are bitwise the ones of gradus/core/random_math.h's box_muller, the formula the
// CUDA kernel runs, on whichever copy of the CPU backend the loader picked: the portable test
// runs this on the baseline (SSE2, no FMA) copy too, where the sampler's multiply-adds must still
// be fused (std::fma), as they are on the GPU.
TEST(BackendRandom, NormalsAreTheDeviceFormulaBitwise) {
  const PhiloxState st = fresh_state();
  SCOPED_TRACE(st.seed);
  const int64_t n = 4099;  // whole blocks (vectorised) and a partial one
  Tensor out = poisoned({n}, DType::f32);
  cpu().normal(out, st, 0.0, 1.0);
  const float* p = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const auto block =
        rmath::box_muller(philox4x32(st.offset + static_cast<uint64_t>(i) / 4, st.seed));
    ASSERT_EQ(std::bit_cast<uint32_t>(p[i]),
              std::bit_cast<uint32_t>(block[static_cast<size_t>(i % 4)]))
        << "element " << i << ": " << p[i] << " vs " << block[static_cast<size_t>(i % 4)];
  }
  // A short draw (one block, then a partial one on the scalar path) gives the same values.
  Tensor tail = poisoned({5}, DType::f32);
  cpu().normal(tail, {st.seed, st.offset}, 0.0, 1.0);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(tail.data_ptr<float>()[i], p[i]) << i;
}

TEST(BackendRandom, IntegerUniformRanges) {
  const PhiloxState st = fresh_state();
  SCOPED_TRACE(st.seed);
  const int64_t n = 100000;
  Tensor out = poisoned({n}, DType::i64);
  cpu().uniform(out, st, -3, 7);
  std::vector<int64_t> counts(10, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = out.data_ptr<int64_t>()[i];
    ASSERT_EQ(v, -3 + static_cast<int64_t>(word(st, i) % 10));
    ++counts[static_cast<size_t>(v + 3)];
  }
  for (int64_t c : counts) EXPECT_NEAR(c, n / 10, 6 * std::sqrt(n * 0.09));
  // Ranges wider than 2^32 use two words per element.
  Tensor wide = poisoned({1000}, DType::i64);
  const double lo = -1e12, hi = 3e12;
  cpu().uniform(wide, st, lo, hi);
  for (int64_t i = 0; i < 1000; ++i) {
    const auto w = philox4x32(st.offset + static_cast<uint64_t>(i) / 2, st.seed);
    const size_t j = static_cast<size_t>(i % 2) * 2;
    const uint64_t v64 = (static_cast<uint64_t>(w[j + 1]) << 32) | w[j];
    ASSERT_EQ(
        wide.data_ptr<int64_t>()[i],
        static_cast<int64_t>(lo) + static_cast<int64_t>(v64 % static_cast<uint64_t>(hi - lo)));
  }
  // uint8 and bool outputs.
  Tensor u = poisoned({1000}, DType::u8);
  cpu().uniform(u, st, 0, 256);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(u.data_ptr<uint8_t>()[i], word(st, i) % 256);
  Tensor b = poisoned({1000}, DType::boolean);
  cpu().uniform(b, st, 0, 2);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(b.data_ptr<bool>()[i], word(st, i) % 2 == 1);
}

TEST(BackendRandom, BernoulliAndDropout) {
  const PhiloxState st = fresh_state();
  SCOPED_TRACE(st.seed);
  // Bernoulli with a per-column probability broadcast over rows.
  const int64_t rows = 20000, cols = 4;
  Tensor probs = make({cols}, {0.0, 0.25, 0.5, 1.0}, DType::f64);
  Tensor out = poisoned({rows, cols}, DType::f32);
  cpu().bernoulli(out, probs.as_strided_raw({rows, cols}, {0, 1}, 0), st);
  const std::vector<double> got = read(out);
  std::vector<double> mean(cols, 0);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const double pr = read(probs)[static_cast<size_t>(i % cols)];
    ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<double>(unit(word(st, i))) < pr ? 1 : 0);
    mean[static_cast<size_t>(i % cols)] += got[static_cast<size_t>(i)];
  }
  for (double& m : mean) m /= rows;
  EXPECT_EQ(mean[0], 0.0);
  EXPECT_NEAR(mean[1], 0.25, 6 * std::sqrt(0.25 * 0.75 / rows));
  EXPECT_NEAR(mean[2], 0.5, 6 * std::sqrt(0.25 / rows));
  EXPECT_EQ(mean[3], 1.0);

  // Dropout: mask = u >= p, out = x * mask / (1 - p).
  const uint64_t vseed = testing::fresh_seed();
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    const int64_t n = 100003;
    const double p = 0.3;
    Tensor x = make({n}, rounded(uniform_values(n, vseed, -2, 2), dt), dt);
    Tensor y = poisoned({n}, dt);
    Tensor mask = poisoned({n}, DType::u8);
    cpu().dropout(x, p, st, y, mask);
    const std::vector<double> xv = read(x), yv = read(y), mv = read(mask);
    double kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = unit(word(st, i)) >= static_cast<float>(p);
      ASSERT_EQ(mv[static_cast<size_t>(i)], keep ? 1 : 0) << i;
      const double expected = keep ? xv[static_cast<size_t>(i)] / (1 - p) : 0.0;
      ASSERT_NEAR(yv[static_cast<size_t>(i)], expected, rtol_for(dt) * std::abs(expected)) << i;
      kept += keep;
    }
    EXPECT_NEAR(kept / n, 0.7, 6 * std::sqrt(0.21 / n));
  }
  // p = 1 drops everything without producing NaN (no 0 * inf).
  Tensor x = make({5}, {1, 2, 3, 4, 5}, DType::f32);
  Tensor y = poisoned({5}, DType::f32), mask = poisoned({5}, DType::u8);
  cpu().dropout(x, 1.0, st, y, mask);
  EXPECT_TRUE(close(read(y), {0, 0, 0, 0, 0}, 0, 0));
  EXPECT_TRUE(close(read(mask), {0, 0, 0, 0, 0}, 0, 0));
}

}  // namespace
}  // namespace gradus::backend_test
