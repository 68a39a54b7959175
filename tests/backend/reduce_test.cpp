// CPU reductions against float64 references: every ReduceOp over many axis sets, contiguous /
// transposed / sliced inputs, the parallel chunked and column paths, integer / half / bool dtypes,
// empty and 0-d inputs, NaN and infinity semantics, thread-count independence.
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "backend_test_util.h"
#include "gradus/core/threads.h"

namespace gradus::backend_test {
namespace {

using backend::ReduceOp;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// groups[o] = the input values reduced into output o, in row-major input order.
std::vector<std::vector<double>> group(const std::vector<double>& x, const Shape& shape,
                                       const std::vector<int64_t>& dims, Shape& out_shape) {
  out_shape = shape;
  for (int64_t d : dims) out_shape[d] = 1;
  std::vector<std::vector<double>> groups(static_cast<size_t>(shape_numel(out_shape)));
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    int64_t rem = i, o = 0, mul = 1;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      const int64_t idx = rem % shape[d];
      rem /= shape[d];
      o += (out_shape[d] == 1 ? 0 : idx) * mul;
      mul *= out_shape[d];
    }
    groups[static_cast<size_t>(o)].push_back(x[static_cast<size_t>(i)]);
  }
  return groups;
}

double ref_one(ReduceOp op, const std::vector<double>& g) {
  long double acc = 0;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::mean:
      for (double v : g) acc += v;
      return op == ReduceOp::sum ? static_cast<double>(acc)
                                 : static_cast<double>(acc / static_cast<long double>(g.size()));
    case ReduceOp::sum_squares:
      for (double v : g) acc += static_cast<long double>(v) * v;
      return static_cast<double>(acc);
    case ReduceOp::prod:
      acc = 1;
      for (double v : g) acc *= v;
      return static_cast<double>(acc);
    case ReduceOp::max:
    case ReduceOp::min: {
      double r = op == ReduceOp::max ? -kInf : kInf;
      for (double v : g) {
        if (std::isnan(v)) return v;
        r = op == ReduceOp::max ? std::max(r, v) : std::min(r, v);
      }
      return r;
    }
    case ReduceOp::argmax:
    case ReduceOp::argmin: {
      size_t best = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        if (std::isnan(g[best])) break;
        if (std::isnan(g[i]) || (op == ReduceOp::argmax ? g[i] > g[best] : g[i] < g[best])) {
          best = i;
        }
      }
      return static_cast<double>(best);
    }
    case ReduceOp::logsumexp: {
      double m = -kInf;
      for (double v : g) m = std::max(m, v);
      if (std::isinf(m)) return m;
      for (double v : g) acc += std::exp(static_cast<long double>(v - m));
      return m + static_cast<double>(std::log(acc));
    }
    case ReduceOp::any:
    case ReduceOp::all: {
      bool r = op == ReduceOp::all;
      for (double v : g) r = op == ReduceOp::any ? (r || v != 0) : (r && v != 0);
      return r;
    }
  }
  return 0;
}

DType out_dtype(ReduceOp op, DType in) {
  if (op == ReduceOp::argmax || op == ReduceOp::argmin) return DType::i64;
  if (op == ReduceOp::any || op == ReduceOp::all) return DType::boolean;
  if (!is_floating(in)) return DType::i64;
  return in;
}

// Reduces x (any layout) with the backend and checks against the reference.
void check(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, double rtol,
           const std::string& what, DType out_dt = DType::boolean) {
  if (out_dt == DType::boolean) out_dt = out_dtype(op, x.dtype());
  Shape out_shape;
  const auto groups = group(read(x), x.sizes(), dims, out_shape);
  Tensor out = poisoned(out_shape, out_dt);
  cpu().reduce(op, x, out, dims);
  std::vector<double> expected;
  for (const auto& g : groups) expected.push_back(ref_one(op, g));
  // Absolute slack for cancelling sums (result much smaller than the unit-sized terms).
  EXPECT_TRUE(close(read(out), rounded(expected, out_dt), rtol, rtol * 0.1, what));
}

const std::vector<std::vector<int64_t>> kAxisSets = {
    {0},    {1},    {2},    {3},       {0, 1},    {1, 2},      {0, 2},
    {0, 3}, {1, 3}, {2, 3}, {0, 1, 2}, {1, 2, 3}, {0, 1, 2, 3}};

std::string name_of(ReduceOp op, const std::vector<int64_t>& dims, const char* layout) {
  std::ostringstream os;  // (string operator+ chains trip GCC 12's -Wrestrict)
  os << "op " << static_cast<int>(op) << " " << layout << " dims";
  for (int64_t d : dims) os << " " << d;
  return os.str();
}

TEST(BackendReduce, EveryOpEveryAxisSetAndLayout) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const Shape shape = {4, 5, 6, 7};
  const int64_t n = shape_numel(shape);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::prod, ReduceOp::max, ReduceOp::min,
                      ReduceOp::sum_squares, ReduceOp::logsumexp, ReduceOp::any, ReduceOp::all,
                      ReduceOp::argmax, ReduceOp::argmin}) {
    const bool arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
    // prod stays in range with values near 1; any/all see exact zeros.
    const double lo = op == ReduceOp::prod ? 0.7 : -3, hi = op == ReduceOp::prod ? 1.4 : 3;
    std::vector<double> v = uniform_values(n, seed, lo, hi);
    if (op == ReduceOp::any || op == ReduceOp::all) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 3 == 0 || v[i] > 2.5) ? 0.0 : v[i];
    }
    for (DType dt : {DType::f64, DType::f32}) {
      const double rtol = dt == DType::f64 ? 1e-12 : 1e-6;
      Tensor x = make(shape, v, dt);
      // A permuted view [7, 6, 5, 4] of a contiguous [4, 5, 6, 7] tensor.
      Tensor xp = x.as_strided_raw({7, 6, 5, 4}, {1, 7, 42, 210}, 0);
      // A sliced view: every other element of the last axis of a [4, 5, 6, 14] tensor.
      std::vector<double> wide(static_cast<size_t>(n * 2), kNaN);
      for (int64_t i = 0; i < n; ++i)
        wide[static_cast<size_t>(2 * i + 1)] = v[static_cast<size_t>(i)];
      Tensor xs = make({4, 5, 6, 14}, wide, dt).as_strided_raw(shape, {420, 84, 14, 2}, 1);
      for (const auto& dims : kAxisSets) {
        if (arg && dims.size() != 1) continue;
        check(op, x, dims, rtol, name_of(op, dims, "contiguous"));
        check(op, xp, dims, rtol, name_of(op, dims, "permuted"));
        check(op, xs, dims, rtol, name_of(op, dims, "sliced"));
      }
    }
  }
}

TEST(BackendReduce, LargeRowColumnAndFullReductionsAreThreadIndependent) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int threads = get_num_threads();
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
  };
  const std::vector<Case> cases = {{{3, 100003}, {1}},      {{100003, 3}, {0}},
                                   {{700, 300}, {0}},       {{1000003}, {0}},
                                   {{20, 3000, 7}, {0, 2}}, {{50, 4000}, {0, 1}}};
  for (const Case& c : cases) {
    const int64_t n = shape_numel(c.shape);
    Tensor x = make(c.shape, uniform_values(n, seed, -1, 2), DType::f32);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::sum_squares,
                        ReduceOp::logsumexp}) {
      check(op, x, c.dims, 1e-6, name_of(op, c.dims, "large"));
      // Bitwise identical results with 1 and 2 threads.
      Shape out_shape = c.shape;
      for (int64_t d : c.dims) out_shape[d] = 1;
      Tensor a = poisoned(out_shape, DType::f32), b = poisoned(out_shape, DType::f32);
      set_num_threads(1);
      cpu().reduce(op, x, a, c.dims);
      set_num_threads(2);
      cpu().reduce(op, x, b, c.dims);
      set_num_threads(threads);
      EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.numel()) * 4));
    }
    if (c.dims.size() == 1) check(ReduceOp::argmax, x, c.dims, 0, "large argmax");
  }
}

// any / all over many chunks reduced by many threads at once: each chunk's partial result must
// land (they once shared the words of a std::vector<bool>, and 16 threads lost some).
TEST(BackendReduce, AnyAllOverManyChunksWithManyThreads) {
  const int threads = get_num_threads();
  set_num_threads(16);
  const int64_t n = int64_t{1} << 21;
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  Tensor x = make({n}, uniform_values(n, seed, 1, 2), DType::f32);  // no zero anywhere
  Tensor z = x.clone();
  z.data_ptr<float>()[n / 2 + 12345] = 0.0f;  // one zero
  Tensor y = make({n}, std::vector<double>(static_cast<size_t>(n), 0.0), DType::f32);
  y.data_ptr<float>()[n - 3] = 0.5f;  // one non-zero
  Tensor out = poisoned({1}, DType::boolean);
  auto reduce_to_bool = [&](ReduceOp op, const Tensor& in) {
    cpu().reduce(op, in, out, {0});
    return *static_cast<const bool*>(out.raw_data());
  };
  int wrong = 0;
  for (int rep = 0; rep < 150; ++rep) {
    wrong += !reduce_to_bool(ReduceOp::all, x) + reduce_to_bool(ReduceOp::all, z) +
             !reduce_to_bool(ReduceOp::any, y) + !reduce_to_bool(ReduceOp::any, z);
  }
  set_num_threads(threads);
  EXPECT_EQ(wrong, 0);
}

TEST(BackendReduce, IntegerHalfAndBoolInputs) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  // int32 values summing past 2^31 accumulate exactly in int64.
  std::vector<double> big(1000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = 2000000000.0 - static_cast<double>(i);
  Tensor xi = make({10, 100}, big, DType::i32);
  check(ReduceOp::sum, xi, {0, 1}, 0, "i32 sum");
  check(ReduceOp::sum, xi, {1}, 0, "i32 row sum");
  check(ReduceOp::max, xi, {0}, 0, "i32 max", DType::i32);
  check(ReduceOp::min, xi, {1}, 0, "i32 min", DType::i32);
  check(ReduceOp::argmin, xi, {1}, 0, "i32 argmin");
  Tensor xu = make({4, 6}, {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,
                            13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24},
                   DType::u8);
  check(ReduceOp::sum, xu, {0}, 0, "u8 sum");
  check(ReduceOp::prod, xu, {1}, 0, "i64 prod");
  Tensor xb = make({3, 4}, {0, 0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1}, DType::boolean);
  check(ReduceOp::any, xb, {1}, 0, "bool any");
  check(ReduceOp::all, xb, {1}, 0, "bool all");
  check(ReduceOp::sum, xb, {0, 1}, 0, "bool sum");
  for (DType half : {DType::f16, DType::bf16}) {
    Tensor xh = make({64, 33}, rounded(uniform_values(64 * 33, seed, -1, 1), half), half);
    check(ReduceOp::sum, xh, {0}, rtol_for(half), "half sum", half);
    check(ReduceOp::sum, xh, {1}, 1e-6, "half sum into f32", DType::f32);
    check(ReduceOp::mean, xh, {0, 1}, 1e-6, "half mean into f32", DType::f32);
    check(ReduceOp::argmax, xh, {1}, 0, "half argmax");
  }
}

TEST(BackendReduce, EmptyZeroDimAndSpecialValues) {
  // Reducing an empty axis: sum 0, mean NaN, prod 1, any false, all true, logsumexp -inf.
  Tensor empty_x = empty({3, 0}, {DType::f32, Device::cpu(), false});
  auto reduce_empty = [&](ReduceOp op, DType out_dt) {
    Tensor out = poisoned({3, 1}, out_dt);
    cpu().reduce(op, empty_x, out, {1});
    return read(out);
  };
  EXPECT_TRUE(close(reduce_empty(ReduceOp::sum, DType::f32), {0, 0, 0}, 0, 0));
  EXPECT_TRUE(close(reduce_empty(ReduceOp::mean, DType::f32), {kNaN, kNaN, kNaN}, 0, 0));
  EXPECT_TRUE(close(reduce_empty(ReduceOp::prod, DType::f32), {1, 1, 1}, 0, 0));
  EXPECT_TRUE(close(reduce_empty(ReduceOp::any, DType::boolean), {0, 0, 0}, 0, 0));
  EXPECT_TRUE(close(reduce_empty(ReduceOp::all, DType::boolean), {1, 1, 1}, 0, 0));
  EXPECT_TRUE(close(reduce_empty(ReduceOp::logsumexp, DType::f32), {-kInf, -kInf, -kInf}, 0, 0));

  // A 0-d tensor reduced over no axes is the op applied to its one element.
  Tensor s = make({}, {-2.5}, DType::f64);
  auto reduce0 = [&](ReduceOp op, DType out_dt) {
    Tensor out = poisoned({}, out_dt);
    cpu().reduce(op, s, out, {});
    return read(out)[0];
  };
  EXPECT_EQ(reduce0(ReduceOp::sum, DType::f64), -2.5);
  EXPECT_EQ(reduce0(ReduceOp::mean, DType::f64), -2.5);
  EXPECT_EQ(reduce0(ReduceOp::sum_squares, DType::f64), 6.25);
  EXPECT_EQ(reduce0(ReduceOp::logsumexp, DType::f64), -2.5);
  EXPECT_EQ(reduce0(ReduceOp::argmax, DType::i64), 0);
  EXPECT_EQ(reduce0(ReduceOp::any, DType::boolean), 1);

  // NaN: max/min propagate it, argmax/argmin pick the first NaN; ties pick the first index.
  Tensor x = make({2, 5}, {1, kNaN, 3, kNaN, 3, 2, 7, 7, -1, -1}, DType::f32);
  auto run = [&](ReduceOp op, DType out_dt) {
    Tensor out = poisoned({2, 1}, out_dt);
    cpu().reduce(op, x, out, {1});
    return read(out);
  };
  EXPECT_TRUE(close(run(ReduceOp::max, DType::f32), {kNaN, 7}, 0, 0));
  EXPECT_TRUE(close(run(ReduceOp::min, DType::f32), {kNaN, -1}, 0, 0));
  EXPECT_TRUE(close(run(ReduceOp::argmax, DType::i64), {1, 1}, 0, 0));
  EXPECT_TRUE(close(run(ReduceOp::argmin, DType::i64), {1, 3}, 0, 0));
  EXPECT_TRUE(close(run(ReduceOp::sum, DType::f32), {kNaN, 14}, 0, 0));

  // The same semantics down columns (the column-mode path: reduce the leading axis).
  Tensor xc = make({5, 2}, {1, 2, kNaN, 7, 3, 7, kNaN, -1, 3, -1}, DType::f32);
  auto run_cols = [&](ReduceOp op, DType out_dt) {
    Tensor out = poisoned({1, 2}, out_dt);
    cpu().reduce(op, xc, out, {0});
    return read(out);
  };
  EXPECT_TRUE(close(run_cols(ReduceOp::max, DType::f32), {kNaN, 7}, 0, 0));
  EXPECT_TRUE(close(run_cols(ReduceOp::min, DType::f32), {kNaN, -1}, 0, 0));
  EXPECT_TRUE(close(run_cols(ReduceOp::argmax, DType::i64), {1, 1}, 0, 0));
  EXPECT_TRUE(close(run_cols(ReduceOp::argmin, DType::i64), {1, 3}, 0, 0));

  // logsumexp: large values stay finite, all -inf gives -inf, any +inf gives +inf.
  Tensor l = make({3, 3}, {1000, 1000, -kInf, -kInf, -kInf, -kInf, 1, kInf, 2}, DType::f64);
  Tensor lo = poisoned({3, 1}, DType::f64);
  cpu().reduce(ReduceOp::logsumexp, l, lo, {1});
  EXPECT_TRUE(close(read(lo), {1000 + std::log(2.0), -kInf, kInf}, 1e-15, 0));
}

}  // namespace
}  // namespace gradus::backend_test
