// What the golden tests share: the committed PyTorch/transformers reference files, and the
// comparison that reports how many elements differ and the worst one.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gradus/io/safetensors.h"

namespace gradus::golden {

// tests/data/golden/<name>, read once per test process.
inline const io::SafetensorsFile& file(const std::string& name) {
  static std::map<std::string, io::SafetensorsFile> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    it = cache
             .emplace(name,
                      io::read_safetensors(std::string(GRADUS_TEST_DATA_DIR) + "/golden/" + name))
             .first;
  }
  return it->second;
}

// |actual - expected| <= atol + rtol (|expected| + floor) everywhere, with floor = max|expected|
// when relative_floor is set (for elements that are sums of cancelling terms, such as BatchNorm's
// input gradient, whose error scales with the terms rather than the small result), else 0.
struct Tol {
  double rtol = 0;
  double atol = 0;
  bool relative_floor = false;
};

inline ::testing::AssertionResult close(const Tensor& actual, const Tensor& expected, Tol tol,
                                        const std::string& what) {
  if (!actual.defined()) return ::testing::AssertionFailure() << what << ": undefined";
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure() << what << ": shape " << shape_str(actual.sizes())
                                         << ", PyTorch " << shape_str(expected.sizes());
  }
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  double floor = 0;
  if (tol.relative_floor) {
    for (double v : e) floor = std::max(floor, std::abs(v));
  }
  size_t bad = 0, worst = 0;
  double worst_ratio = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - e[i]);
    const double bound = tol.atol + tol.rtol * (std::abs(e[i]) + floor);
    if (err <= bound) continue;
    ++bad;
    const double ratio = std::isnan(err) ? INFINITY : err / bound;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << " " << shape_str(actual.sizes()) << ": " << bad << " of " << a.size()
         << " elements differ from PyTorch (rtol " << tol.rtol << ", atol " << tol.atol
         << (tol.relative_floor ? ", relative to the largest element" : "")
         << "); worst flat index " << worst << ": gradus " << a[worst] << ", PyTorch " << e[worst];
}

}  // namespace gradus::golden
