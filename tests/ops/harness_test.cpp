// Runs every entry of the op table (harness_cases_*.cpp) on every device:
//  - OpHarness/Forward.<case>_<device>: for each dtype the entry supports, fresh random inputs
//    (with the entry's layouts: transposed, strided, expanded, channels-last, empty, 0-d) against
//    the same op on contiguous CPU float64 inputs, with dtype-aware tolerances; the op is run
//    twice (bitwise-equal results: deterministic, and no element left unwritten) on CPU memory
//    poisoned with NaN; gradients (autograd through a random projection of the outputs) are
//    compared with the float64 reference's too.
//  - OpHarness/Gradcheck.<case>_<device>: float64 autograd gradients against central finite
//    differences (eps 1e-6, atol 1e-5, rtol 1e-3), through the entry's non-contiguous layouts.
// CUDA instances skip cleanly when no GPU is present.
#include <gtest/gtest-spi.h>

#include <cmath>
#include <random>
#include <sstream>

#include "ops/harness.h"

namespace gradus::harness {
namespace {

struct CaseDevice {
  size_t index;
  Device device;
};

// gtest prints the parameter of a failing test with this (instead of its bytes).
void PrintTo(const CaseDevice& p, std::ostream* os) {
  *os << all_cases()[p.index].name << " on " << device_tag(p.device);
}

std::vector<CaseDevice> params(bool differentiable_only) {
  std::vector<CaseDevice> out;
  const std::vector<OpCase>& cases = all_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    if (differentiable_only && !(cases[i].differentiable && cases[i].gradcheck)) continue;
    out.push_back({i, Device::cpu()});
    out.push_back({i, Device::cuda(0)});
  }
  return out;
}

std::string param_name(const ::testing::TestParamInfo<CaseDevice>& info) {
  return all_cases()[info.param.index].name + "_" + device_tag(info.param.device);
}

bool skip_device(Device d) {
  return d.is_cuda() && cuda_device_count() <= d.index();
}

std::vector<double> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// The gradient-check projection: the scalar sum_k <out_k, w_k> for the differentiable outputs.
struct Projection {
  std::vector<size_t> outputs;  // which outputs take part (floating, within diff_outputs)
  std::vector<std::vector<double>> weights;
};

Projection make_projection(const OpCase& c, const std::vector<Tensor>& outs, uint64_t seed) {
  Projection p;
  const size_t n = num_diff_outputs(c, outs);
  for (size_t k = 0; k < n; ++k) {
    if (!outs[k].defined() || !is_floating(outs[k].dtype())) continue;
    p.outputs.push_back(k);
    p.weights.push_back(random_values(static_cast<size_t>(outs[k].numel()), seed + 7919 * k));
  }
  return p;
}

// Autograd gradients of the projection w.r.t. every leaf that requires grad (zeros where the
// outputs do not depend on a leaf). `weight_dtypes` rounds the weights like the test run's.
std::vector<Tensor> autograd_grads(const Built& b, const std::vector<Tensor>& outs,
                                   const Projection& p, const std::vector<DType>& weight_dtypes) {
  std::vector<Tensor> sel, ws, leaves;
  for (size_t j = 0; j < p.outputs.size(); ++j) {
    const Tensor& o = outs[p.outputs[j]];
    if (!o.requires_grad()) continue;
    sel.push_back(o);
    ws.push_back(
        tensor(p.weights[j], o.sizes(), {weight_dtypes[j]}).to(o.device(), o.dtype()).detach());
  }
  for (const Tensor& l : b.leaves) {
    if (l.requires_grad()) leaves.push_back(l);
  }
  std::vector<Tensor> grads;
  if (!sel.empty() && !leaves.empty()) grads = grad(sel, leaves, ws, false, true);
  std::vector<Tensor> full;
  size_t g = 0;
  for (const Tensor& l : b.leaves) {
    if (!l.requires_grad()) {
      full.emplace_back();
      continue;
    }
    Tensor gi = g < grads.size() ? grads[g] : Tensor();
    ++g;
    full.push_back(gi.defined() ? gi : zeros_like(l.detach()));
  }
  return full;
}

void run_forward(const OpCase& c, Device device, DType dtype, uint64_t seed) {
  const std::vector<std::vector<double>> base = draw_inputs(c, seed, dtype);
  const bool grads = c.differentiable && is_floating(dtype);
  Built test;
  std::vector<Tensor> outs, again;
  {
    PoisonGuard poison;
    test = build_inputs(c, base, dtype, device, grads, false);
    outs = c.fn(test.inputs);
    NoGradGuard no_grad;
    again = c.fn(test.inputs);
  }
  const Built ref = build_inputs(c, base, dtype, Device::cpu(), grads, true);
  const std::vector<Tensor> ref_outs = c.fn(ref.inputs);
  ASSERT_EQ(outs.size(), ref_outs.size());

  for (size_t k = 0; k < outs.size(); ++k) {
    const std::string what = "output " + std::to_string(k);
    ASSERT_TRUE(outs[k].defined()) << what << " is undefined";
    EXPECT_EQ(outs[k].device(), device) << what << " is on " << outs[k].device().str();
    if (!is_floating(ref_outs[k].dtype())) {
      EXPECT_EQ(outs[k].dtype(), ref_outs[k].dtype()) << what;
    } else if (c.check_dtype && is_floating(dtype)) {
      EXPECT_EQ(dtype_name(outs[k].dtype()), std::string(dtype_name(dtype))) << what;
    }
    const Tolerance tol = tolerance_for(outs[k].dtype(), ref_outs[k], c.tol, c.mag_floor);
    EXPECT_TRUE(compare(outs[k], ref_outs[k], tol.rtol, tol.atol, what));
    if (device.is_cpu() || c.cuda_deterministic) {
      EXPECT_TRUE(identical(again[k], outs[k], what));
    } else {
      EXPECT_TRUE(compare(again[k], outs[k], tol.rtol, tol.atol, what + " (second run)"));
    }
  }
  if (!grads) return;
  const bool half = dtype == DType::f16 || dtype == DType::bf16;
  if (half && !c.half_grads) return;

  const Projection p = make_projection(c, outs, seed ^ 0xABCDEFull);
  std::vector<DType> wdt;
  for (size_t k : p.outputs) {
    wdt.push_back(outs[k].dtype());
    EXPECT_EQ(outs[k].requires_grad(), ref_outs[k].requires_grad())
        << "output " << k << ": requires_grad differs from the float64 reference";
  }
  const std::vector<Tensor> g_test = autograd_grads(test, outs, p, wdt);
  const std::vector<Tensor> g_ref = autograd_grads(ref, ref_outs, p, wdt);
  for (size_t i = 0; i < g_test.size(); ++i) {
    if (!g_test[i].defined() || !g_ref[i].defined()) continue;
    // Backward chains several ops that each round to the low-precision dtype.
    const double chain = half ? 4.0 : 1.0;
    const Tolerance tol =
        tolerance_for(g_test[i].dtype(), g_ref[i], c.tol * c.grad_tol * chain, 1.0);
    EXPECT_TRUE(
        compare(g_test[i], g_ref[i], tol.rtol, tol.atol, "gradient of input " + std::to_string(i)));
    EXPECT_EQ(g_test[i].dtype(), test.leaves[i].dtype()) << "gradient of input " << i;
  }
}

void run_gradcheck(const OpCase& c, Device device, uint64_t seed) {
  constexpr double kEps = 1e-6, kAtol = 1e-5, kRtol = 1e-3;
  std::vector<std::vector<double>> base = draw_inputs(c, seed, DType::f64);
  const Built b = build_inputs(c, base, DType::f64, device, true, false);
  const std::vector<Tensor> outs = c.fn(b.inputs);
  const Projection p = make_projection(c, outs, seed ^ 0x5151ull);
  std::vector<DType> wdt(p.outputs.size(), DType::f64);
  const std::vector<Tensor> analytic = autograd_grads(b, outs, p, wdt);

  auto loss_at = [&](const std::vector<std::vector<double>>& values) {
    NoGradGuard no_grad;
    const Built bb = build_inputs(c, values, DType::f64, device, false, false);
    const std::vector<Tensor> o = c.fn(bb.inputs);
    double loss = 0;
    for (size_t j = 0; j < p.outputs.size(); ++j) {
      const std::vector<double> v = o[p.outputs[j]].to_vector<double>();
      for (size_t e = 0; e < v.size(); ++e) loss += v[e] * p.weights[j][e];
    }
    return loss;
  };

  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (!analytic[i].defined()) continue;
    const std::vector<double> a = analytic[i].to_vector<double>();
    ASSERT_EQ(a.size(), base[i].size()) << "gradient of input " << i << " has the wrong size";
    size_t bad = 0, worst = 0;
    double worst_err = -1, worst_num = 0;
    for (size_t e = 0; e < base[i].size(); ++e) {
      const double saved = base[i][e];
      base[i][e] = saved + kEps;
      const double plus = loss_at(base);
      base[i][e] = saved - kEps;
      const double minus = loss_at(base);
      base[i][e] = saved;
      const double numeric = (plus - minus) / (2 * kEps);
      const double err = std::abs(a[e] - numeric);
      if (!(err <= kAtol + kRtol * std::abs(numeric))) {
        ++bad;
        if (!(err <= worst_err)) worst_err = err, worst = e, worst_num = numeric;
      }
    }
    EXPECT_EQ(bad, 0u) << "input " << i << " (base shape " << shape_str(base_shape(c.inputs[i]))
                       << "): " << bad << " of " << a.size()
                       << " gradient elements differ from finite differences; worst flat index "
                       << worst << ": autograd " << a[worst] << ", numeric " << worst_num;
  }
}

// Runs `body`, turning a gradus error into a test failure that names the dtype, so one failing
// dtype does not hide the others.
template <typename Body>
void guarded(const std::string& label, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    ADD_FAILURE() << label << ": threw " << e.what();
  }
}

class Forward : public ::testing::TestWithParam<CaseDevice> {};
class Gradcheck : public ::testing::TestWithParam<CaseDevice> {};

TEST_P(Forward, MatchesFloat64Reference) {
  const OpCase& c = all_cases()[GetParam().index];
  const Device device = GetParam().device;
  if (skip_device(device)) GTEST_SKIP() << "no CUDA device";
  for (DType dtype : c.dtypes) {
    const uint64_t seed = case_seed();
    const std::string label = c.name + " " + device_tag(device) + " " + dtype_tag(dtype) +
                              " (replay: GRADUS_HARNESS_SEED=" + std::to_string(seed) + ")";
    SCOPED_TRACE(label);
    guarded(label, [&] { run_forward(c, device, dtype, seed); });
  }
}

TEST_P(Gradcheck, MatchesFiniteDifferences) {
  const OpCase& c = all_cases()[GetParam().index];
  const Device device = GetParam().device;
  if (skip_device(device)) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = case_seed();
  const std::string label = c.name + " " + device_tag(device) +
                            " (replay: GRADUS_HARNESS_SEED=" + std::to_string(seed) + ")";
  SCOPED_TRACE(label);
  guarded(label, [&] { run_gradcheck(c, device, seed); });
}

INSTANTIATE_TEST_SUITE_P(OpHarness, Forward, ::testing::ValuesIn(params(false)), param_name);
INSTANTIATE_TEST_SUITE_P(OpHarness, Gradcheck, ::testing::ValuesIn(params(true)), param_name);

// ------------------------------------------------------------------------- random ops per device
class RandomOps : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (skip_device(GetParam())) GTEST_SKIP() << "no CUDA device";
  }
};

// Dropout in training: zeros with probability p, survivors scaled by 1 / (1 - p), the gradient is
// the same mask and scale, the same generator state gives the same mask.
TEST_P(RandomOps, DropoutTrainingStatistics) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Device device = GetParam();
  const double p = 0.3;
  Tensor x = testing::random_tensor({300, 40}, seed, 0.5, 1.5, DType::f32, device).detach();
  x.set_requires_grad(true);
  Generator gen(seed);
  Tensor y;
  {
    PoisonGuard poison;
    y = dropout(x, p, true, &gen);
  }
  ASSERT_EQ(y.sizes(), x.sizes());
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  size_t zeros = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0.0) {
      ++zeros;
    } else {
      ASSERT_NEAR(yv[i], xv[i] / (1 - p), 1e-5 * std::abs(xv[i] / (1 - p))) << "element " << i;
    }
  }
  const double n = static_cast<double>(xv.size());
  const double frac = static_cast<double>(zeros) / n;
  EXPECT_NEAR(frac, p, 5 * std::sqrt(p * (1 - p) / n)) << "fraction of dropped elements";

  y.backward(ones_like(y.detach()));
  const std::vector<double> gv = x.grad().to_vector<double>();
  for (size_t i = 0; i < gv.size(); ++i) {
    ASSERT_NEAR(gv[i], yv[i] == 0.0 ? 0.0 : 1.0 / (1 - p), 1e-6) << "gradient element " << i;
  }

  Generator again(seed);
  NoGradGuard no_grad;
  EXPECT_TRUE(identical(dropout(x, p, true, &again), y.detach(), "dropout with the same state"));
  Tensor other = dropout(x, p, true, &gen);  // the generator advanced: a different mask
  EXPECT_NE(other.to_vector<double>(), yv);
  EXPECT_TRUE(compare(dropout(x, p, false, &gen), x, 0, 0, "dropout in eval mode"));
  EXPECT_TRUE(compare(dropout(x, 0.0, true, &gen), x, 0, 0, "dropout with p = 0"));
  EXPECT_TRUE(compare(dropout(x, 1.0, true, &gen), zeros_like(x), 0, 0, "dropout with p = 1"));
}

INSTANTIATE_TEST_SUITE_P(OpHarness, RandomOps, ::testing::Values(Device::cpu(), Device::cuda(0)),
                         [](const ::testing::TestParamInfo<Device>& info) {
                           return device_tag(info.param);
                         });

// Philox gives the same stream on every device: one seed, one initialisation, one dropout mask.
TEST(OpHarnessCuda, RandomStreamsMatchTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  Generator a(seed), b(seed);
  EXPECT_TRUE(compare(rand({37, 5}, {}, &a), rand({37, 5}, {DType::f32, Device::cuda(0)}, &b), 1e-7,
                      0, "rand"));
  EXPECT_TRUE(compare(randn({37, 5}, {}, &a), randn({37, 5}, {DType::f32, Device::cuda(0)}, &b),
                      1e-5, 1e-6, "randn"));
  Tensor x = testing::random_tensor({64, 33}, seed, 0.5, 1.5, DType::f32);
  EXPECT_TRUE(compare(dropout(x, 0.4, true, &a), dropout(x.to(Device::cuda(0)), 0.4, true, &b),
                      1e-6, 0, "dropout"));
}

// --------------------------------------------------------------------- the harness checks itself
// Deliberately broken "ops" must make the harness fail, each for the right reason.
TEST(OpHarnessSelfTest, CatchesAWrongStridedPath) {
  const OpCase c = op("broken_strided", {f({4, 5}, Layout::transposed)}, [](const Inputs& x) {
    return x[0].is_contiguous() ? exp(x[0]) : add(exp(x[0]), 1e-3);
  });
  EXPECT_NONFATAL_FAILURE(run_forward(c, Device::cpu(), DType::f32, testing::fresh_seed()),
                          "out of tolerance");
}

TEST(OpHarnessSelfTest, CatchesAnUnwrittenElement) {
  const OpCase c = op("broken_unwritten", {f({3, 4})}, [](const Inputs& x) {
    Tensor out = empty(x[0].sizes(), x[0].options());  // poisoned memory in the test run
    NoGradGuard no_grad;
    // The float32 "kernel" forgets the last row; the float64 reference writes everything.
    const int64_t rows = x[0].dtype() == DType::f32 ? 2 : 3;
    out.slice(0, 0, rows).copy_(x[0].slice(0, 0, rows));
    return out;
  });
  EXPECT_NONFATAL_FAILURE(run_forward(c, Device::cpu(), DType::f32, testing::fresh_seed()),
                          "NaN where the reference has a value");
}

TEST(OpHarnessSelfTest, CatchesNondeterminism) {
  const OpCase c = op("broken_nondeterministic", {f({3, 4})}, [](const Inputs& x) {
    static int calls = 0;
    return add(x[0], 1e-3 * (++calls % 2));
  });
  EXPECT_NONFATAL_FAILURE(run_forward(c, Device::cpu(), DType::f64, testing::fresh_seed()),
                          "two runs on the same inputs differ");
}

TEST(OpHarnessSelfTest, CatchesAWrongGradient) {
  // y = x.detach() * x: the forward is x^2, autograd says x, the truth is 2x.
  const OpCase c = op("broken_gradient", {f({3, 4}, Layout::strided)},
                      [](const Inputs& x) { return mul(x[0].detach(), x[0]); });
  EXPECT_NONFATAL_FAILURE(run_gradcheck(c, Device::cpu(), testing::fresh_seed()),
                          "differ from finite differences");
}

TEST(OpHarnessSelfTest, CatchesALowPrecisionGradientBug) {
  // Correct in f64 (the reference), 1 % off in f16: the gradient comparison must notice.
  const OpCase c = op("broken_half_backward", {f({3, 4})}, [](const Inputs& x) {
    if (x[0].dtype() != DType::f16) return mul(x[0], 2.0);
    return add(mul(x[0].detach(), 2.0), mul(sub(x[0], x[0].detach()), 2.02));
  });
  EXPECT_NONFATAL_FAILURE(run_forward(c, Device::cpu(), DType::f16, testing::fresh_seed()),
                          "gradient of input 0");
}

TEST(OpHarnessSelfTest, CatchesAWrongOutputDtype) {
  const OpCase c =
      op("broken_dtype", {f({2, 3})}, [](const Inputs& x) { return x[0].to(DType::f64); });
  EXPECT_NONFATAL_FAILURE(run_forward(c, Device::cpu(), DType::f32, testing::fresh_seed()),
                          "float64");
}

}  // namespace
}  // namespace gradus::harness
