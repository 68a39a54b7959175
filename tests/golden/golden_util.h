// What the golden tests share: the committed PyTorch/transformers reference files, and the
// comparison that reports how many elements differ and the worst one.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "gradus/gradus.h"
#include "gradus/io/safetensors.h"
#include "support/test_util.h"

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

// A language model (ids -> logits) against a transformers golden file written by
// tools/make_gpt2_golden.py or make_llama_golden.py: "logits" for "input", the mean cross-entropy
// "loss" against "target", "grad.<name>" for every parameter, and "adamw.step1.<name>" after one
// AdamW step (lr 1e-3, betas (0.9, 0.99), eps 1e-8, weight decay 0.1), each within tol. Returns
// how many parameters' gradients were checked.
inline int expect_language_model_matches(nn::Module& model, const io::SafetensorsFile& g,
                                         double tol) {
  using testing::all_close;
  const Tensor logits = model.forward(g.at("input"));
  EXPECT_EQ(logits.sizes(), g.at("logits").sizes());
  if (logits.sizes() != g.at("logits").sizes()) return 0;
  EXPECT_TRUE(all_close(logits, g.at("logits"), tol, tol));
  const Tensor loss =
      cross_entropy(logits.reshape({-1, logits.size(-1)}), g.at("target").reshape({-1}));
  EXPECT_NEAR(loss.item(), g.at("loss").item(), tol);
  loss.backward();
  int checked = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(p.grad().defined());
    if (!p.grad().defined()) continue;
    EXPECT_TRUE(all_close(p.grad(), g.at("grad." + name), tol, tol));
    ++checked;
  }
  optim::AdamWOptions o;
  o.lr = 1e-3;
  o.betas = {0.9, 0.99};
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  optim::AdamW opt(model.parameters(), o);
  opt.step();
  for (const auto& [name, p] : model.named_parameters()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(all_close(p, g.at("adamw.step1." + name), tol, tol));
  }
  return checked;
}

}  // namespace gradus::golden
