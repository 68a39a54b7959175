// CPU index_select_rows / index_add_rows / gather / scatter_add against loops written here.
#include <random>

#include "backend_test_util.h"

namespace gradus::backend_test {
namespace {

std::vector<double> random_indices(int64_t n, int64_t limit, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, limit - 1);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<double>(dist(rng));
  return v;
}

TEST(BackendIndexing, IndexSelectAndIndexAddRows) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (int64_t D : {1, 7, 300}) {
      const int64_t V = 50, n = 2000;  // many duplicate indices
      Tensor table = make({V, D}, rounded(uniform_values(V * D, seed, -1, 1), dt), dt);
      const std::vector<double> idx = random_indices(n, V, seed + 1);
      Tensor index = make({n}, idx, DType::i64);
      Tensor out = poisoned({n, D}, dt);
      cpu().index_select_rows(table, index, out);
      const std::vector<double> tv = read(table);
      std::vector<double> expected;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t d = 0; d < D; ++d) {
          expected.push_back(tv[static_cast<size_t>(static_cast<int64_t>(idx[i]) * D + d)]);
        }
      }
      EXPECT_TRUE(close(read(out), expected, 0, 0, "index_select_rows"));

      // index_add_rows accumulates duplicates (f64 reference, per-dtype tolerance).
      Tensor grad = make({n, D}, rounded(uniform_values(n * D, seed + 2, -1, 1), dt), dt);
      Tensor table_grad = make({V, D}, std::vector<double>(static_cast<size_t>(V * D), 0.0), dt);
      cpu().index_add_rows(grad, index, table_grad);
      const std::vector<double> gv = read(grad);
      std::vector<double> acc(static_cast<size_t>(V * D), 0.0);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t d = 0; d < D; ++d) {
          acc[static_cast<size_t>(static_cast<int64_t>(idx[i]) * D + d)] +=
              gv[static_cast<size_t>(i * D + d)];
        }
      }
      // bf16 sums in float32 and rounds once: one bf16 rounding (2^-8 relative).
      const double rtol = dt == DType::bf16 ? 0x1p-8 : (dt == DType::f32 ? 1e-5 : 1e-12);
      EXPECT_TRUE(close(read(table_grad), acc, rtol, 1e-5, "index_add_rows"));
    }
  }
}

// 16-bit accumulation sums in float32 and rounds once. Every addend here is below half an ulp of
// the accumulator (1 + ...), so rounding after each addition would leave exactly 1; the addends
// lie on a grid where the float32 sum is exact, so the result must be the exact sum rounded once.
TEST(BackendIndexing, HalfAccumulationRoundsOnce) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (DType dt : {DType::f16, DType::bf16}) {
    const int64_t n = std::uniform_int_distribution<int64_t>(400, 900)(rng);
    const std::vector<double> v = rounded(uniform_values(n, seed + 1, 0x1p-13, 0x1p-11), dt);
    double exact = 1.0;
    for (double x : v) exact += x;
    const double expected = rounded({exact}, dt)[0];
    ASSERT_GT(expected, 1.0);

    Tensor target = make({1}, {1.0}, dt);
    cpu().scatter_add(target, 0,
                      make({n}, std::vector<double>(static_cast<size_t>(n), 0.0), DType::i64),
                      make({n}, v, dt));
    EXPECT_EQ(read(target)[0], expected) << dtype_name(dt) << " scatter_add";

    Tensor table = make({1, 1}, {1.0}, dt);
    cpu().index_add_rows(make({n, 1}, v, dt),
                         make({n}, std::vector<double>(static_cast<size_t>(n), 0.0), DType::i64),
                         table);
    EXPECT_EQ(read(table)[0], expected) << dtype_name(dt) << " index_add_rows";
  }
}

// Reference gather / scatter_add over explicit multi-indices.
struct Idx3 {
  int64_t a, b, c;
};
int64_t flat(const Shape& s, Idx3 i) {
  return (i.a * s[1] + i.b) * s[2] + i.c;
}

TEST(BackendIndexing, GatherAndScatterAddAlongEachDim) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const Shape xs = {6, 7, 8};
  for (int64_t dim = 0; dim < 3; ++dim) {
    for (DType dt : {DType::f32, DType::f64, DType::i64}) {
      // The index is smaller than x in the other dims (allowed by torch.gather).
      Shape is = {4, 5, 6};
      is[dim] = 9;
      const int64_t n = shape_numel(is);
      const std::vector<double> idx = random_indices(n, xs[dim], seed + dim);
      Tensor index = make(is, idx, DType::i64);
      const std::vector<double> xv = rounded(uniform_values(shape_numel(xs), seed, -5, 5), dt);
      Tensor x = make(xs, xv, dt);
      Tensor out = poisoned(is, dt);
      cpu().gather(x, dim, index, out);
      std::vector<double> expected(static_cast<size_t>(n));
      for (int64_t a = 0; a < is[0]; ++a) {
        for (int64_t b = 0; b < is[1]; ++b) {
          for (int64_t c = 0; c < is[2]; ++c) {
            const int64_t i = flat(is, {a, b, c});
            Idx3 src{a, b, c};
            const int64_t k = static_cast<int64_t>(idx[static_cast<size_t>(i)]);
            (dim == 0 ? src.a : dim == 1 ? src.b : src.c) = k;
            expected[static_cast<size_t>(i)] = xv[static_cast<size_t>(flat(xs, src))];
          }
        }
      }
      EXPECT_TRUE(close(read(out), expected, 0, 0, "gather dim " + std::to_string(dim)));

      // scatter_add: src larger than the index in every dim; duplicates accumulate.
      Shape ss = is;
      for (auto& s : ss) s += 1;
      const std::vector<double> sv = rounded(uniform_values(shape_numel(ss), seed + 9, -5, 5), dt);
      Tensor src = make(ss, sv, dt);
      const std::vector<double> base =
          rounded(uniform_values(shape_numel(xs), seed + 5, -5, 5), dt);
      Tensor target = make(xs, base, dt);
      cpu().scatter_add(target, dim, index, src);
      std::vector<double> acc = base;
      for (int64_t a = 0; a < is[0]; ++a) {
        for (int64_t b = 0; b < is[1]; ++b) {
          for (int64_t c = 0; c < is[2]; ++c) {
            Idx3 dst{a, b, c};
            const int64_t k = static_cast<int64_t>(idx[static_cast<size_t>(flat(is, {a, b, c}))]);
            (dim == 0 ? dst.a : dim == 1 ? dst.b : dst.c) = k;
            acc[static_cast<size_t>(flat(xs, dst))] += sv[static_cast<size_t>(flat(ss, {a, b, c}))];
          }
        }
      }
      EXPECT_TRUE(close(read(target), acc, dt == DType::f64 ? 1e-12 : 1e-5, 1e-5,
                        "scatter_add dim " + std::to_string(dim)));
    }
  }
}

}  // namespace
}  // namespace gradus::backend_test
