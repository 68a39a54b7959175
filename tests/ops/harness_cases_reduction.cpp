// Harness table: reductions over several axis sets, with and without keepdim, on contiguous and
// permuted (channels-last) inputs, empty inputs and integer inputs.
#include "ops/harness.h"

namespace gradus::harness {
namespace {

using L = Layout;
using Dims = std::vector<int64_t>;

std::string dims_tag(const Dims& dims, bool keepdim) {
  std::string s = "_dims";
  if (dims.empty()) s += "_all";
  // (Appending piecewise: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.)
  for (int64_t d : dims) {
    s += d < 0 ? "_m" : "_";
    s += std::to_string(d < 0 ? -d : d);
  }
  return s + (keepdim ? "_keep" : "");
}

// The axis sets every reduction runs over ([3, 4, 5] input).
const std::vector<std::pair<Dims, bool>> kAxisSets = {
    {{}, false}, {{0}, false}, {{-1}, true}, {{0, 2}, false}, {{1}, true}, {{2, 0, 1}, true},
};

}  // namespace

std::vector<OpCase> reduction_cases() {
  std::vector<OpCase> c;
  using DimsFn = Tensor (*)(const Tensor&, const Dims&, bool);
  struct Reduce {
    const char* name;
    DimsFn fn;
    double lo, hi;
    bool ints;
    double tol;
    double grad_tol = 1.0;
  };
  const Reduce reductions[] = {
      {"sum", [](const Tensor& x, const Dims& d, bool k) { return sum(x, d, k); }, -1, 1, true, 1},
      {"mean", [](const Tensor& x, const Dims& d, bool k) { return mean(x, d, k); }, -1, 1, false,
       1},
      // Products of up to 60 factors in [0.5, 1.5]: keep them O(1) for the tolerances.
      {"prod", [](const Tensor& x, const Dims& d, bool k) { return prod(x, d, k); }, 0.8, 1.25,
       false, 1},
      {"var", [](const Tensor& x, const Dims& d, bool k) { return var(x, d, 1, k); }, -1, 1, false,
       1},
      {"var_biased", [](const Tensor& x, const Dims& d, bool k) { return var(x, d, 0, k); }, -1, 1,
       false, 1},
      // std's gradient (x - mean) / ((n - 1) std) divides a rounded difference by std, which is
      // often well below 1 for 3 samples: low-precision gradients get 4x the tolerance.
      {"std", [](const Tensor& x, const Dims& d, bool k) { return std(x, d, 1, k); }, -1, 1, false,
       1, 4},
      {"amax", [](const Tensor& x, const Dims& d, bool k) { return amax(x, d, k); }, -1, 1, true,
       1},
      {"amin", [](const Tensor& x, const Dims& d, bool k) { return amin(x, d, k); }, -1, 1, true,
       1},
      {"logsumexp", [](const Tensor& x, const Dims& d, bool k) { return logsumexp(x, d, k); }, -3,
       3, false, 1},
  };
  for (const Reduce& r : reductions) {
    const std::vector<DType> dtypes = r.ints ? kFloatInt : kFloat;
    for (const auto& [dims, keep] : kAxisSets) {
      if (std::string(r.name) == "amax" || std::string(r.name) == "amin") {
        if (dims.empty()) continue;  // amax/amin take an explicit axis list
      }
      auto fn = r.fn;
      auto body = [fn, dims = dims, keep = keep](const Inputs& x) { return fn(x[0], dims, keep); };
      c.push_back(op(std::string(r.name) + dims_tag(dims, keep), {range({3, 4, 5}, r.lo, r.hi)},
                     body, dtypes)
                      .tolerance(r.tol, r.grad_tol));
    }
    auto fn = r.fn;
    // Non-contiguous inputs: the kernel walks permuted and strided memory.
    c.push_back(op(
                    std::string(r.name) + "_channels_last",
                    {range({2, 3, 4}, r.lo, r.hi, L::channels_last)},
                    [fn](const Inputs& x) { return fn(x[0], {1}, false); }, dtypes)
                    .tolerance(r.tol, r.grad_tol));
    c.push_back(op(
                    std::string(r.name) + "_strided", {range({4, 3}, r.lo, r.hi, L::strided)},
                    [fn](const Inputs& x) { return fn(x[0], {-1}, true); }, dtypes)
                    .tolerance(r.tol, r.grad_tol));
    // Reduced along the stride-0 axis and across it (var/std along it are 0: not differentiable).
    c.push_back(op(
                    std::string(r.name) + "_expanded", {range({3, 4}, r.lo, r.hi, L::expanded)},
                    [fn](const Inputs& x) { return fn(x[0], {1}, false); }, dtypes)
                    .tolerance(r.tol, r.grad_tol));
    c.push_back(op(
                    std::string(r.name) + "_expanded_axis",
                    {range({3, 4}, r.lo, r.hi, L::expanded)},
                    [fn](const Inputs& x) { return fn(x[0], {0}, true); }, dtypes)
                    .tolerance(r.tol, r.grad_tol));
    if (r.name == std::string("var") || r.name == std::string("std") ||
        r.name == std::string("var_biased")) {
      c.back().no_gradcheck();
    }
    // A size-1 axis and a long row (the vectorised inner loop and its tail). The unbiased
    // var/std of one element is NaN (0/0, like PyTorch): compared forward only.
    c.push_back(op(
                    std::string(r.name) + "_size1", {range({3, 1, 4}, r.lo, r.hi)},
                    [fn](const Inputs& x) { return fn(x[0], {1}, false); }, dtypes)
                    .tolerance(r.tol, r.grad_tol));
    if (r.name == std::string("var") || r.name == std::string("std")) c.back().no_gradcheck();
    c.push_back(op(
                    std::string(r.name) + "_long_row", {range({2, 67}, r.lo, r.hi)},
                    [fn](const Inputs& x) { return fn(x[0], {1}, false); }, dtypes)
                    .tolerance(r.tol, r.grad_tol));
  }
  // Empty reductions: a sum over an empty axis is 0, a mean NaN; reducing a non-empty axis of an
  // empty tensor gives an empty result.
  c.push_back(op(
      "sum_empty_axis", {f({0, 3})}, [](const Inputs& x) { return sum(x[0], {0}); }, kFloatInt));
  c.push_back(op(
      "sum_empty_all", {f({2, 0})}, [](const Inputs& x) { return sum(x[0]); }, kFloatInt));
  c.push_back(op(
      "sum_of_empty_keeps_empty", {f({0, 3})}, [](const Inputs& x) { return sum(x[0], {1}, true); },
      kFloatInt));
  c.push_back(op("mean_empty_axis", {f({0, 3})}, [](const Inputs& x) {
                return mean(x[0], {0});
              }).nondiff());
  c.push_back(op("prod_empty_axis", {f({0, 3})}, [](const Inputs& x) { return prod(x[0], {0}); }));
  c.push_back(op("sum_scalar_input", {f({})}, [](const Inputs& x) { return sum(x[0]); }));
  // Tensor methods.
  c.push_back(op("method_sum", {f({3, 4})}, [](const Inputs& x) { return x[0].sum(); }));
  c.push_back(op("method_mean_dims", {f({3, 4}, L::transposed)},
                 [](const Inputs& x) { return x[0].mean({0}, true); }));

  // Whole-tensor max/min, (values, indices) along a dim, argmax/argmin.
  c.push_back(op(
      "max_all", {f({3, 4, 5})}, [](const Inputs& x) { return max(x[0]); }, kFloatInt));
  c.push_back(op(
      "min_all", {f({4, 5}, L::transposed)}, [](const Inputs& x) { return min(x[0]); }, kFloatInt));
  for (int64_t dim : {0, 1, -1}) {
    for (bool keep : {false, true}) {
      std::string tag = dim < 0 ? "_m" : "_";
      tag += std::to_string(dim < 0 ? -dim : dim);
      if (keep) tag += "_keep";
      c.push_back(opn(
          "max_dim" + tag, {f({3, 4, 5})},
          [dim, keep](const Inputs& x) {
            ValuesIndices r = max(x[0], dim, keep);
            return std::vector<Tensor>{r.values, r.indices};
          },
          kFloatInt));
      c.push_back(opn(
          "min_dim" + tag, {f({3, 4, 5}, L::channels_last)},
          [dim, keep](const Inputs& x) {
            ValuesIndices r = min(x[0], dim, keep);
            return std::vector<Tensor>{r.values, r.indices};
          },
          kFloatInt));
      c.push_back(op(
                      "argmax" + tag, {f({3, 4, 5})},
                      [dim, keep](const Inputs& x) { return argmax(x[0], dim, keep); }, kFloatInt)
                      .nondiff());
      c.push_back(op(
                      "argmin" + tag, {f({3, 4, 5}, L::strided)},
                      [dim, keep](const Inputs& x) { return argmin(x[0], dim, keep); }, kFloatInt)
                      .nondiff());
    }
  }
  // Ties: the first index of the extreme value wins (PyTorch's rule on the CPU and GPU).
  c.push_back(
      op(
          "argmax_ties", {ties({6, 7})}, [](const Inputs& x) { return argmax(x[0], 1); }, kFloatInt)
          .nondiff());
  c.push_back(
      op(
          "argmin_ties", {ties({6, 7})}, [](const Inputs& x) { return argmin(x[0], 0); }, kFloatInt)
          .nondiff());
  c.push_back(
      op("method_argmax", {f({4, 6})}, [](const Inputs& x) { return x[0].argmax(1); }).nondiff());

  c.push_back(op("norm", {f({3, 4, 5})}, [](const Inputs& x) { return norm(x[0]); }));
  c.push_back(
      op("norm_strided", {f({4, 6}, L::strided)}, [](const Inputs& x) { return norm(x[0]); }));
  const std::vector<DType> one = {DType::f32};
  c.push_back(op(
                  "any", {mask({3, 4})}, [](const Inputs& x) { return any(x[0]); }, one)
                  .nondiff());
  c.push_back(op(
                  "all", {mask({2, 2})}, [](const Inputs& x) { return all(x[0]); }, one)
                  .nondiff());
  c.push_back(op("any_float", {ties({3, 4})}, [](const Inputs& x) { return any(x[0]); }).nondiff());
  c.push_back(op("all_float", {ties({2, 3})}, [](const Inputs& x) { return all(x[0]); }).nondiff());
  return c;
}

}  // namespace gradus::harness
