// The attention tiles' AVX-512 kernels (src/backend/cpu/attention_tiles.h) on their own: the
// product against a float64 triple loop over both orientations of A, beta 0 and 1, and sizes that
// are not multiples of the kernel's blocks (rows) or vectors (columns, masked), including more than
// one 64-column panel; its claim that an element's value does not depend on m and n; the
// transpose. The softmax steps are covered through the attention tests (tests/ops), which also run
// with GRADUS_ATTENTION_ISA=base.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/attention_tiles.h"
#include "backend_test_util.h"

namespace gradus::backend_test {
namespace {

namespace tile = backend::cpu::tile;

std::vector<float> random_floats(size_t n, uint64_t seed) {
  const std::vector<double> v = uniform_values(static_cast<int64_t>(n), seed, -1, 1);
  return {v.begin(), v.end()};
}

bool avx512_expected() {
  __builtin_cpu_init();
  const char* isa = std::getenv("GRADUS_ATTENTION_ISA");
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         !(isa != nullptr && std::string(isa) == "base");
}

TEST(AttentionTiles, RunExactlyWhereTheCpuHasAvx512) {
  EXPECT_EQ(tile::avx512(), avx512_expected());
}

TEST(AttentionTiles, ProductMatchesFloat64) {
  if (!tile::avx512()) GTEST_SKIP() << "no AVX-512 here: the tiles run on BLAS";
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  int cases = 0;
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{{32, 64, 32},
                                                                   {32, 32, 64},
                                                                   {64, 32, 32},
                                                                   {1, 1, 1},
                                                                   {7, 5, 3},
                                                                   {13, 17, 19},
                                                                   {33, 80, 24},
                                                                   {9, 150, 70},
                                                                   {4, 16, 0}}) {
    for (const bool ta : {false, true}) {
      for (const float beta : {0.0F, 1.0F}) {
        const int64_t lda = (ta ? m : k) + 3, ldb = n + 5, ldc = n + 2;
        const std::vector<float> a = random_floats(static_cast<size_t>((ta ? k : m) * lda), seed);
        const std::vector<float> b = random_floats(static_cast<size_t>(k * ldb), seed + 1);
        std::vector<float> c = random_floats(static_cast<size_t>(m * ldc), seed + 2);
        const std::vector<float> c0 = c;
        const float alpha = 0.75F;
        tile::gemm(ta, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < ldc; ++j) {
            const size_t at = static_cast<size_t>(i * ldc + j);
            if (j >= n) {  // the padding past n is never written
              ASSERT_EQ(c[at], c0[at]) << "wrote past column " << n;
              continue;
            }
            double ref = 0;
            for (int64_t p = 0; p < k; ++p) {
              const double x =
                  ta ? a[static_cast<size_t>(p * lda + i)] : a[static_cast<size_t>(i * lda + p)];
              ref += x * b[static_cast<size_t>(p * ldb + j)];
            }
            ref = alpha * ref + beta * c0[at];
            ASSERT_NEAR(c[at], ref, 1e-5 * (1.0 + static_cast<double>(k)))
                << "m " << m << " n " << n << " k " << k << " ta " << ta << " beta " << beta
                << " at (" << i << ", " << j << ")";
          }
        }
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 36);
}

// The first m' x n' of a product are bitwise the m' x n' product of the same rows and columns:
// what lets the backward's one-pass and two-pass paths (tiles of different shapes) agree bitwise.
TEST(AttentionTiles, AnElementDoesNotDependOnTheProductsShape) {
  if (!tile::avx512()) GTEST_SKIP() << "no AVX-512 here: the tiles run on BLAS";
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t m = 32, n = 64, k = 40;
  const std::vector<float> a = random_floats(static_cast<size_t>(m * k), seed);
  const std::vector<float> b = random_floats(static_cast<size_t>(k * n), seed + 1);
  std::vector<float> whole(static_cast<size_t>(m * n));
  tile::gemm(false, m, n, k, 1.0F, a.data(), k, b.data(), n, 0.0F, whole.data(), n);
  for (const auto& [mp, np] : std::vector<std::array<int64_t, 2>>{{5, 64}, {32, 17}, {3, 1}}) {
    std::vector<float> part(static_cast<size_t>(mp * n));
    tile::gemm(false, mp, np, k, 1.0F, a.data(), k, b.data(), n, 0.0F, part.data(), n);
    for (int64_t i = 0; i < mp; ++i) {
      for (int64_t j = 0; j < np; ++j) {
        ASSERT_EQ(part[static_cast<size_t>(i * n + j)], whole[static_cast<size_t>(i * n + j)])
            << mp << " x " << np << " at (" << i << ", " << j << ")";
      }
    }
  }
}

TEST(AttentionTiles, TransposeMovesEveryElement) {
  if (!tile::avx512()) GTEST_SKIP() << "no AVX-512 here: the tiles run on BLAS";
  const uint64_t seed = testing::fresh_seed();
  for (const auto& [rows, cols] : std::vector<std::array<int64_t, 2>>{{256, 32}, {37, 5}, {1, 1}}) {
    const int64_t ld = cols + 4, ldd = rows + 3;
    const std::vector<float> src = random_floats(static_cast<size_t>(rows * ld), seed);
    std::vector<float> dst(static_cast<size_t>(cols * ldd), -7.0F);
    tile::transpose(src.data(), ld, rows, cols, dst.data(), ldd);
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t t = 0; t < ldd; ++t) {
        const float want = t < rows ? src[static_cast<size_t>(t * ld + c)] : -7.0F;
        ASSERT_EQ(dst[static_cast<size_t>(c * ldd + t)], want) << rows << " x " << cols;
      }
    }
  }
}

}  // namespace
}  // namespace gradus::backend_test
