// A small float64 finite-difference gradient checker for op tests.
//
// gradcheck(fn, inputs) compares the gradients autograd computes for every input that requires
// grad with central differences. The op's output is contracted with fixed random weights
// (L = sum(fn(x) * R)), so every output element's gradient takes part and a wrong gradient
// cannot hide behind a symmetric upstream gradient of ones.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace gradus::testing {

using GradFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

namespace detail {
inline double weighted_sum(const Tensor& out, const std::vector<double>& r) {
  const std::vector<double> v = out.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * r[i];
  return s;
}
}  // namespace detail

// inputs: CPU tensors; those with requires_grad() are checked (they are copied to contiguous
// float64 leaves first, so fn may take views of them to exercise strided paths).
inline ::testing::AssertionResult gradcheck(const GradFn& fn, const std::vector<Tensor>& inputs,
                                            GradcheckOptions opt = {},
                                            uint64_t seed = fresh_seed()) {
  std::vector<Tensor> leaves;
  std::vector<size_t> checked;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (!in.defined()) {
      leaves.emplace_back();
      continue;
    }
    const bool diff = in.requires_grad();
    Tensor leaf = in.detach();
    if (diff) leaf = leaf.to(DType::f64);
    leaf = leaf.contiguous().clone().detach();
    if (diff) {
      leaf.set_requires_grad(true);
      checked.push_back(i);
    }
    leaves.push_back(leaf);
  }
  if (checked.empty()) return ::testing::AssertionFailure() << "no input requires grad";

  Tensor out = fn(leaves);
  if (!is_floating(out.dtype())) {
    return ::testing::AssertionFailure() << "the output is not floating point";
  }
  const Tensor r = random_tensor(out.sizes(), seed, -1.0, 1.0, DType::f64);
  const std::vector<double> rv = r.to_vector<double>();
  std::vector<Tensor> diff_leaves;
  for (size_t i : checked) diff_leaves.push_back(leaves[i]);
  const Tensor loss = sum(mul(out.to(DType::f64), r));
  const std::vector<Tensor> analytic = grad({loss}, diff_leaves, {}, false, /*allow_unused=*/true);

  NoGradGuard no_grad;
  for (size_t k = 0; k < checked.size(); ++k) {
    Tensor& leaf = leaves[checked[k]];
    const std::vector<double> a = analytic[k].defined()
                                      ? analytic[k].to_vector<double>()
                                      : std::vector<double>(static_cast<size_t>(leaf.numel()), 0.0);
    if (analytic[k].defined() && analytic[k].sizes() != leaf.sizes()) {
      return ::testing::AssertionFailure()
             << "input " << checked[k] << ": gradient shape " << shape_str(analytic[k].sizes())
             << " differs from the input's " << shape_str(leaf.sizes());
    }
    double* p = leaf.data_ptr<double>();
    for (int64_t j = 0; j < leaf.numel(); ++j) {
      const double orig = p[j];
      p[j] = orig + opt.eps;
      const double plus = detail::weighted_sum(fn(leaves), rv);
      p[j] = orig - opt.eps;
      const double minus = detail::weighted_sum(fn(leaves), rv);
      p[j] = orig;
      const double numeric = (plus - minus) / (2 * opt.eps);
      const double got = a[static_cast<size_t>(j)];
      if (!(std::abs(got - numeric) <= opt.atol + opt.rtol * std::abs(numeric))) {
        return ::testing::AssertionFailure()
               << "input " << checked[k] << " " << shape_str(leaf.sizes()) << ", element " << j
               << ": autograd " << got << " vs finite difference " << numeric << " (seed " << seed
               << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// A float64 CPU leaf that requires grad, uniform in [lo, hi).
inline Tensor grad_input(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t = random_tensor(shape, seed, lo, hi, DType::f64);
  t.set_requires_grad(true);
  return t;
}

// Checks t's shape and values (row-major) against a reference computed in the test.
inline ::testing::AssertionResult values_match(const Tensor& t, const Shape& shape,
                                               const std::vector<double>& expected,
                                               double rtol = 1e-10, double atol = 1e-12) {
  if (t.sizes() != shape) {
    return ::testing::AssertionFailure()
           << "shape " << shape_str(t.sizes()) << ", expected " << shape_str(shape);
  }
  const std::vector<double> v = t.to_vector<double>();
  if (v.size() != expected.size()) {
    return ::testing::AssertionFailure() << v.size() << " values, expected " << expected.size();
  }
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(expected[i]) && std::isnan(v[i])) continue;
    if (std::isinf(expected[i]) && v[i] == expected[i]) continue;
    if (!(std::abs(v[i] - expected[i]) <= atol + rtol * std::abs(expected[i]))) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << v[i] << " vs expected " << expected[i] << " (rtol "
             << rtol << ", atol " << atol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// int64 values uniform in [lo, hi) from std::mt19937_64.
inline std::vector<int64_t> random_ints(int64_t n, int64_t lo, int64_t hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi - 1);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t& x : v) x = dist(rng);
  return v;
}

inline Tensor index_tensor(const std::vector<int64_t>& v, const Shape& shape,
                           DType dtype = DType::i64) {
  return from_vector<int64_t>(v, shape, {.dtype = DType::i64}).to(dtype);
}

// Row-major multi-index <-> flat index helpers for naive references.
inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// Asserts that `stmt` throws ErrorType whose message contains every one of `needles`.
#define GRADUS_EXPECT_ERROR(stmt, ErrorType, ...)                               \
  do {                                                                          \
    try {                                                                       \
      (void)(stmt);                                                             \
      ADD_FAILURE() << #stmt " did not throw " #ErrorType;                      \
    } catch (const ErrorType& e) {                                              \
      for (const std::string& needle : std::vector<std::string>{__VA_ARGS__}) { \
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)        \
            << "message \"" << e.what() << "\" lacks \"" << needle << "\"";     \
      }                                                                         \
    } catch (const std::exception& e) {                                         \
      ADD_FAILURE() << #stmt " threw the wrong error type: " << e.what();       \
    }                                                                           \
  } while (0)

}  // namespace gradus::testing
