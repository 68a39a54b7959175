// Reductions against naive float64 references, finite-difference gradients and bad inputs.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "ops/gradcheck.h"

namespace gradus {
namespace {

using testing::fresh_seed;
using testing::grad_input;
using testing::gradcheck;
using testing::random_tensor;
using testing::values_match;

using Slot = std::vector<double>;
using Finalize = std::function<double(const Slot&)>;

// Naive reference: the elements of x grouped by output slot of a reduction over `dims` (empty =
// all), each slot reduced by f. Returns the keepdim-shaped values.
std::vector<double> naive_reduce(const Tensor& x, std::vector<int64_t> dims, const Finalize& f) {
  const Shape shape = x.sizes();
  const int64_t nd = x.dim();
  if (dims.empty()) {
    dims.resize(static_cast<size_t>(nd));
    std::iota(dims.begin(), dims.end(), 0);
  }
  for (int64_t& d : dims) d = d < 0 ? d + nd : d;
  Shape keep = shape;
  for (int64_t d : dims) keep[d] = 1;
  std::vector<Slot> slots(static_cast<size_t>(shape_numel(keep)));
  const std::vector<double> v = x.to_vector<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> idx = testing::unravel(i, shape);
    for (int64_t d : dims) idx[d] = 0;
    slots[testing::ravel(idx, keep)].push_back(v[i]);
  }
  std::vector<double> out;
  for (const Slot& s : slots) out.push_back(f(s));
  return out;
}

Shape reduced_shape(const Shape& shape, std::vector<int64_t> dims, bool keepdim) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (dims.empty()) {
    dims.resize(shape.size());
    std::iota(dims.begin(), dims.end(), 0);
  }
  for (int64_t& d : dims) d = d < 0 ? d + nd : d;
  Shape out;
  for (int64_t i = 0; i < nd; ++i) {
    const bool reduced = std::find(dims.begin(), dims.end(), i) != dims.end();
    if (!reduced) out.push_back(shape[i]);
    if (reduced && keepdim) out.push_back(1);
  }
  return out;
}

double ref_sum(const Slot& s) {
  return std::accumulate(s.begin(), s.end(), 0.0);
}
double ref_mean(const Slot& s) {
  return ref_sum(s) / static_cast<double>(s.size());
}
double ref_prod(const Slot& s) {
  return std::accumulate(s.begin(), s.end(), 1.0, std::multiplies<>());
}
double ref_max(const Slot& s) {
  return *std::max_element(s.begin(), s.end());
}
double ref_min(const Slot& s) {
  return *std::min_element(s.begin(), s.end());
}
double ref_argmax(const Slot& s) {
  return static_cast<double>(std::max_element(s.begin(), s.end()) - s.begin());
}
double ref_argmin(const Slot& s) {
  return static_cast<double>(std::min_element(s.begin(), s.end()) - s.begin());
}
double ref_lse(const Slot& s) {
  const double m = ref_max(s);
  double acc = 0;
  for (double v : s) acc += std::exp(v - m);
  return m + std::log(acc);
}
Finalize ref_var(int64_t correction) {
  return [correction](const Slot& s) {
    const double m = ref_mean(s);
    double acc = 0;
    for (double v : s) acc += (v - m) * (v - m);
    return acc / std::max<double>(0.0, static_cast<double>(s.size()) - correction);
  };
}

const std::vector<std::vector<int64_t>> kDims = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {1, 2}};

TEST(Reduction, SumMeanProdMatchNaiveReferenceOverEveryAxisSet) {
  const Tensor x = random_tensor({3, 4, 5}, fresh_seed(), 0.5, 1.5);
  for (const auto& dims : kDims) {
    for (bool keepdim : {false, true}) {
      SCOPED_TRACE(::testing::PrintToString(dims) + (keepdim ? " keepdim" : ""));
      const Shape s = reduced_shape(x.sizes(), dims, keepdim);
      EXPECT_TRUE(values_match(sum(x, dims, keepdim), s, naive_reduce(x, dims, ref_sum)));
      EXPECT_TRUE(values_match(mean(x, dims, keepdim), s, naive_reduce(x, dims, ref_mean)));
      EXPECT_TRUE(values_match(prod(x, dims, keepdim), s, naive_reduce(x, dims, ref_prod)));
      EXPECT_TRUE(values_match(amax(x, dims, keepdim), s, naive_reduce(x, dims, ref_max)));
      EXPECT_TRUE(values_match(amin(x, dims, keepdim), s, naive_reduce(x, dims, ref_min)));
      EXPECT_TRUE(values_match(logsumexp(x, dims, keepdim), s, naive_reduce(x, dims, ref_lse)));
    }
  }
}

TEST(Reduction, VarAndStdMatchReferenceForEachCorrection) {
  const Tensor x = random_tensor({4, 3, 6}, fresh_seed(), -2.0, 2.0);
  for (const auto& dims : kDims) {
    for (int64_t correction : {0, 1, 2}) {
      SCOPED_TRACE(::testing::PrintToString(dims) + " correction " + std::to_string(correction));
      const Shape s = reduced_shape(x.sizes(), dims, false);
      const std::vector<double> v = naive_reduce(x, dims, ref_var(correction));
      std::vector<double> sd(v.size());
      std::transform(v.begin(), v.end(), sd.begin(), [](double a) { return std::sqrt(a); });
      EXPECT_TRUE(values_match(var(x, dims, correction), s, v, 1e-9));
      EXPECT_TRUE(values_match(gradus::std(x, dims, correction), s, sd, 1e-9));
    }
  }
  // A single element with the unbiased estimator: 0 / 0 = NaN, like PyTorch.
  EXPECT_TRUE(std::isnan(var(random_tensor({1}, fresh_seed()), {}).item()));
}

TEST(Reduction, StridedAndBroadcastInputs) {
  const uint64_t seed = fresh_seed();
  const Tensor base = random_tensor({6, 7}, seed);
  // Transposed and sliced: [7, 6] -> rows 1, 3, 5.
  const Tensor x = base.t().slice(0, 1, 7, 2);
  ASSERT_FALSE(x.is_contiguous());
  for (const auto& dims : std::vector<std::vector<int64_t>>{{}, {0}, {1}}) {
    const Shape s = reduced_shape(x.sizes(), dims, false);
    EXPECT_TRUE(values_match(sum(x, dims), s, naive_reduce(x, dims, ref_sum)));
    EXPECT_TRUE(values_match(amax(x, dims), s, naive_reduce(x, dims, ref_max)));
    EXPECT_TRUE(values_match(var(x, dims), s, naive_reduce(x, dims, ref_var(1)), 1e-9));
  }
  // An expanded (stride-0) input.
  const Tensor row = random_tensor({1, 5}, seed + 1);
  const Tensor e = row.expand({4, 5});
  EXPECT_TRUE(values_match(sum(e, {0}), {5}, naive_reduce(e, {0}, ref_sum)));
  EXPECT_TRUE(values_match(mean(e, {1}), {4}, naive_reduce(e, {1}, ref_mean)));
}

TEST(Reduction, Float32MatchesFloat64Reference) {
  const Tensor x64 = random_tensor({17, 33}, fresh_seed());
  const Tensor x = x64.to(DType::f32);
  const Tensor x_rounded = x.to(DType::f64);  // the values the f32 op actually sees
  const Tensor s = sum(x, {1});
  EXPECT_EQ(s.dtype(), DType::f32);
  EXPECT_TRUE(values_match(s, {17}, naive_reduce(x_rounded, {1}, ref_sum), 1e-5, 1e-5));
  EXPECT_TRUE(
      values_match(logsumexp(x, {0}), {33}, naive_reduce(x_rounded, {0}, ref_lse), 1e-5, 1e-5));
  EXPECT_TRUE(
      values_match(var(x, {1}), {17}, naive_reduce(x_rounded, {1}, ref_var(1)), 1e-4, 1e-6));
}

TEST(Reduction, IntegerSumsAreExactInt64) {
  const std::vector<int64_t> v = testing::random_ints(24, -1000, 1000, fresh_seed());
  const Tensor x = testing::index_tensor(v, {4, 6}, DType::i32);
  const Tensor s = sum(x, {1});
  EXPECT_EQ(s.dtype(), DType::i64);
  const std::vector<int64_t> got = s.to_vector<int64_t>();
  for (int r = 0; r < 4; ++r) {
    int64_t expect = 0;
    for (int c = 0; c < 6; ++c) expect += v[r * 6 + c];
    EXPECT_EQ(got[r], expect);
  }
  // Integer mean is computed in float32.
  EXPECT_EQ(mean(x).dtype(), DType::f32);
  // Sum of a bool tensor counts the true values.
  const Tensor b = gt(random_tensor({50}, fresh_seed()), 0.0);
  const std::vector<double> bv = b.to_vector<double>();
  EXPECT_EQ(sum(b).item<int64_t>(), static_cast<int64_t>(std::count(bv.begin(), bv.end(), 1.0)));
}

TEST(Reduction, ExtremaWithIndices) {
  const Tensor x = random_tensor({3, 5, 4}, fresh_seed());
  for (int64_t dim : {0, 1, 2, -1}) {
    for (bool keepdim : {false, true}) {
      const Shape s = reduced_shape(x.sizes(), {dim}, keepdim);
      const ValuesIndices mx = max(x, dim, keepdim);
      const ValuesIndices mn = min(x, dim, keepdim);
      EXPECT_TRUE(values_match(mx.values, s, naive_reduce(x, {dim}, ref_max)));
      EXPECT_TRUE(values_match(mx.indices, s, naive_reduce(x, {dim}, ref_argmax)));
      EXPECT_EQ(mx.indices.dtype(), DType::i64);
      EXPECT_TRUE(values_match(mn.values, s, naive_reduce(x, {dim}, ref_min)));
      EXPECT_TRUE(values_match(mn.indices, s, naive_reduce(x, {dim}, ref_argmin)));
      EXPECT_TRUE(values_match(argmax(x, dim, keepdim), s, naive_reduce(x, {dim}, ref_argmax)));
      EXPECT_TRUE(values_match(argmin(x, dim, keepdim), s, naive_reduce(x, {dim}, ref_argmin)));
    }
  }
  EXPECT_TRUE(values_match(max(x), {}, naive_reduce(x, {}, ref_max)));
  EXPECT_TRUE(values_match(min(x), {}, naive_reduce(x, {}, ref_min)));
  // Ties: the first index wins.
  const Tensor t = tensor({1, 3, 3, 2}, {4}, {.dtype = DType::f64});
  EXPECT_EQ(argmax(t, 0).item<int64_t>(), 1);
}

TEST(Reduction, NormAnyAll) {
  const Tensor x = random_tensor({4, 7}, fresh_seed());
  const std::vector<double> v = x.to_vector<double>();
  double ss = 0;
  for (double a : v) ss += a * a;
  EXPECT_TRUE(values_match(norm(x), {}, {std::sqrt(ss)}));
  const Tensor pos = gt(x, 0.0);
  const bool any_pos = std::any_of(v.begin(), v.end(), [](double a) { return a > 0; });
  const bool all_pos = std::all_of(v.begin(), v.end(), [](double a) { return a > 0; });
  EXPECT_EQ(any(pos).item() != 0, any_pos);
  EXPECT_EQ(all(pos).item() != 0, all_pos);
  EXPECT_EQ(any(pos).dtype(), DType::boolean);
  EXPECT_TRUE(all(ge(abs(x), 0.0)).item() != 0);
  EXPECT_FALSE(any(gt(abs(x), 5.0)).item() != 0);
}

TEST(Reduction, EmptyAndScalarInputs) {
  const Tensor e = zeros({0, 3}, {.dtype = DType::f64});
  EXPECT_TRUE(values_match(sum(e, {0}), {3}, {0, 0, 0}));
  EXPECT_TRUE(values_match(prod(e, {0}), {3}, {1, 1, 1}));
  EXPECT_TRUE(values_match(sum(e, {1}), {0}, {}));
  EXPECT_TRUE(std::isnan(mean(e).item()));
  EXPECT_EQ(logsumexp(e, {0}).to_vector<double>()[0], -std::numeric_limits<double>::infinity());
  EXPECT_FALSE(any(e).item() != 0);
  EXPECT_TRUE(all(e).item() != 0);
  // amax over a non-empty axis of an empty tensor is fine (empty result).
  EXPECT_TRUE(values_match(amax(e, {1}), {0}, {}));

  const Tensor s = scalar_tensor(2.5, {.dtype = DType::f64});
  EXPECT_TRUE(values_match(sum(s), {}, {2.5}));
  EXPECT_TRUE(values_match(sum(s, {0}, true), {}, {2.5}));
  EXPECT_TRUE(values_match(amax(s, {-1}), {}, {2.5}));
  const ValuesIndices m = max(s, 0);
  EXPECT_TRUE(values_match(m.values, {}, {2.5}));
  EXPECT_TRUE(values_match(m.indices, {}, {0}));
  // Size-1 dims.
  const Tensor one = random_tensor({1, 4, 1}, fresh_seed());
  EXPECT_TRUE(values_match(sum(one, {0, 2}), {4}, one.to_vector<double>()));
}

TEST(Reduction, TensorMethods) {
  const Tensor x = random_tensor({3, 4}, fresh_seed());
  EXPECT_TRUE(values_match(x.sum(), {}, naive_reduce(x, {}, ref_sum)));
  EXPECT_TRUE(values_match(x.mean(), {}, naive_reduce(x, {}, ref_mean)));
  EXPECT_TRUE(values_match(x.sum({1}), {3}, naive_reduce(x, {1}, ref_sum)));
  EXPECT_TRUE(values_match(x.mean({0}, true), {1, 4}, naive_reduce(x, {0}, ref_mean)));
  EXPECT_TRUE(values_match(x.argmax(1), {3}, naive_reduce(x, {1}, ref_argmax)));
}

// ---------------------------------------------------------------------------------- gradients
TEST(ReductionGrad, SumMeanLogsumexpVarStd) {
  const uint64_t seed = fresh_seed();
  const Tensor x = grad_input({3, 4, 2}, seed);
  for (const auto& dims : kDims) {
    SCOPED_TRACE(::testing::PrintToString(dims));
    EXPECT_TRUE(gradcheck([&](const auto& in) { return sum(in[0], dims); }, {x}));
    EXPECT_TRUE(gradcheck([&](const auto& in) { return mean(in[0], dims, true); }, {x}));
    EXPECT_TRUE(gradcheck([&](const auto& in) { return logsumexp(in[0], dims); }, {x}));
    EXPECT_TRUE(gradcheck([&](const auto& in) { return var(in[0], dims); }, {x}));
    EXPECT_TRUE(gradcheck([&](const auto& in) { return gradus::std(in[0], dims, 0); }, {x}));
  }
  // Through a non-contiguous view of the leaf.
  EXPECT_TRUE(gradcheck(
      [](const auto& in) {
        return sum(in[0].transpose(0, 2).slice(1, 0, 4, 2), {0, 1});
      },
      {x}));
}

TEST(ReductionGrad, ProdIncludingZeros) {
  const Tensor x = grad_input({3, 4}, fresh_seed(), 0.5, 1.5);
  EXPECT_TRUE(gradcheck([](const auto& in) { return prod(in[0], {1}); }, {x}));
  EXPECT_TRUE(gradcheck([](const auto& in) { return prod(in[0]); }, {x}));
  // A slice with one zero (its gradient is the product of the others) and one with two zeros
  // (gradient zero everywhere); prod is a polynomial, so central differences stay exact.
  Tensor z = tensor({0.0, 1.5, 2.0, 0.7, 0.0, 0.0, 1.2, 0.9}, {2, 4}, {.dtype = DType::f64});
  z.set_requires_grad(true);
  EXPECT_TRUE(gradcheck([](const auto& in) { return prod(in[0], {1}); }, {z}));
  Tensor p = prod(z, {1});
  backward({p}, {ones({2}, {.dtype = DType::f64})});
  EXPECT_TRUE(values_match(z.grad(), {2, 4}, {1.5 * 2.0 * 0.7, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(ReductionGrad, ExtremaRouteGradientToTheWinners) {
  const Tensor x = grad_input({4, 5}, fresh_seed());
  EXPECT_TRUE(gradcheck([](const auto& in) { return amax(in[0], {1}); }, {x}));
  EXPECT_TRUE(gradcheck([](const auto& in) { return amin(in[0], {0}, true); }, {x}));
  EXPECT_TRUE(gradcheck([](const auto& in) { return max(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](const auto& in) { return max(in[0], 1).values; }, {x}));
  EXPECT_TRUE(gradcheck([](const auto& in) { return min(in[0], 0, true).values; }, {x}));
  EXPECT_TRUE(gradcheck([](const auto& in) { return norm(in[0]); }, {x}));

  // amax splits the gradient evenly between ties; max(dim) sends it to the first index.
  Tensor t = tensor({1, 3, 3, 2}, {4}, {.dtype = DType::f64});
  t.set_requires_grad(true);
  amax(t, {0}).backward();
  EXPECT_TRUE(values_match(t.grad(), {4}, {0, 0.5, 0.5, 0}));
  Tensor u = tensor({1, 3, 3, 2}, {4}, {.dtype = DType::f64});
  u.set_requires_grad(true);
  mul(max(u, 0).values, 2.0).backward();
  EXPECT_TRUE(values_match(u.grad(), {4}, {0, 2, 0, 0}));
}

// ---------------------------------------------------------------------------------- bad inputs
TEST(ReductionErrors, TypedErrorsNameTheOp) {
  const Tensor x = random_tensor({2, 3}, fresh_seed());
  GRADUS_EXPECT_ERROR(sum(x, {2}), IndexError, "sum", "2");
  GRADUS_EXPECT_ERROR(mean(x, {-3}), IndexError, "mean");
  GRADUS_EXPECT_ERROR(sum(x, {1, -1}), ValueError, "sum", "more than once");
  GRADUS_EXPECT_ERROR(max(x, 4), IndexError, "max");
  GRADUS_EXPECT_ERROR(argmax(x, -5), IndexError, "argmax");
  const Tensor e = zeros({0, 3});
  GRADUS_EXPECT_ERROR(max(e), ValueError, "max", "[0, 3]");
  GRADUS_EXPECT_ERROR(min(e), ValueError, "min");
  GRADUS_EXPECT_ERROR(amax(e, {0}), ValueError, "amax");
  GRADUS_EXPECT_ERROR(max(e, 0), ValueError, "max");
  GRADUS_EXPECT_ERROR(argmin(e, 0), ValueError, "argmin");
  GRADUS_EXPECT_ERROR(sum(Tensor()), ValueError, "sum");
}

}  // namespace
}  // namespace gradus
