// Helpers for gradus's tests: fresh random inputs and comparisons against references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gradus/gradus.h"

namespace gradus::testing {

// A fresh seed per call (tests draw new inputs every run; the seed is printed on failure).
inline uint64_t fresh_seed() {
  static std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

// Uniform values in [lo, hi) drawn from std::mt19937_64 (independent of gradus's RNG), as a
// contiguous tensor of `dtype` on `device`.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0,
                            DType dtype = DType::f64, Device device = Device::cpu()) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (double& v : values) v = dist(rng);
  return tensor(values, shape, {dtype, Device::cpu()}).to(device);
}

// Host copy of all values as double, row-major.
inline std::vector<double> values_of(const Tensor& t) {
  return t.to_vector<double>();
}

// Asserts |actual - expected| <= atol + rtol * |expected| elementwise (NaNs must match).
inline ::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected,
                                            double rtol = 1e-5, double atol = 1e-8) {
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure()
           << "shape " << shape_str(actual.sizes()) << " vs " << shape_str(expected.sizes());
  }
  std::vector<double> a = values_of(actual), e = values_of(expected);
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(e[i]);
    if (both_nan) continue;
    if (!(std::abs(a[i] - e[i]) <= atol + rtol * std::abs(e[i])) &&
        !(std::isinf(e[i]) && a[i] == e[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs expected "
                                           << e[i] << " (rtol " << rtol << ", atol " << atol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace gradus::testing
