// Fused SGD / Adam / AdamW steps: golden values from torch.optim (foreach=False, float32, printed
// by a three-step script), and multi-tensor runs against scalar reference loops.
#include <cmath>

#include "backend_test_util.h"

namespace gradus::backend_test {
namespace {

using backend::AdamArgs;
using backend::SgdArgs;

const std::vector<double> kP0 = {0.5, -1.0, 2.0, 0.25};
const std::vector<std::vector<double>> kGrads = {
    {0.1, -0.2, 0.3, 0.0}, {-0.4, 0.5, 0.05, 1.0}, {0.2, 0.2, -0.1, -2.0}};

std::vector<double> run_sgd(SgdArgs args) {
  Tensor p = make({4}, kP0, DType::f32);
  Tensor buf = poisoned({4}, DType::f32);
  for (size_t s = 0; s < kGrads.size(); ++s) {
    Tensor g = make({4}, kGrads[s], DType::f32);
    args.first_step = s == 0;
    cpu().sgd_step({p}, {g}, {buf}, args);
  }
  return read(p);
}

std::vector<double> run_adam(AdamArgs args) {
  Tensor p = make({4}, kP0, DType::f32);
  Tensor m = make({4}, std::vector<double>(4, 0.0), DType::f32);
  Tensor v = make({4}, std::vector<double>(4, 0.0), DType::f32);
  Tensor vmax = make({4}, std::vector<double>(4, 0.0), DType::f32);
  for (size_t s = 0; s < kGrads.size(); ++s) {
    Tensor g = make({4}, kGrads[s], DType::f32);
    args.step = static_cast<int64_t>(s) + 1;
    cpu().adam_step({p}, {g}, {m}, {v},
                    args.amsgrad ? std::vector<Tensor>{vmax} : std::vector<Tensor>{}, args);
  }
  return read(p);
}

TEST(BackendOptimizer, MatchesTorchOptimGoldenValues) {
  const double rtol = 2e-7, atol = 1e-7;
  SgdArgs sgd;
  sgd.lr = 0.1;
  EXPECT_TRUE(
      close(run_sgd(sgd), {0.51000005, -1.04999995, 1.97500002, 0.350000024}, rtol, atol, "sgd"));
  sgd.momentum = 0.9;
  sgd.dampening = 0.1;
  sgd.weight_decay = 0.01;
  EXPECT_TRUE(close(run_sgd(sgd), {0.52064389, -1.04401207, 1.90862513, 0.257752061}, rtol, atol,
                    "sgd momentum"));
  SgdArgs nest;
  nest.lr = 0.05;
  nest.momentum = 0.8;
  nest.nesterov = true;
  nest.weight_decay = 0.02;
  nest.maximize = true;
  EXPECT_TRUE(close(run_sgd(nest), {0.480390906, -0.943333209, 2.02688026, 0.190043002}, rtol, atol,
                    "sgd nesterov maximize"));
  AdamArgs adam;
  adam.lr = 0.1;
  adam.weight_decay = 0.01;
  EXPECT_TRUE(close(run_adam(adam), {0.464088649, -0.994205475, 1.77342653, 0.106730431}, rtol,
                    atol, "adam"));
  AdamArgs adamw;
  adamw.lr = 0.05;
  adamw.beta1 = 0.8;
  adamw.beta2 = 0.99;
  adamw.eps = 1e-6;
  adamw.weight_decay = 0.1;
  adamw.decoupled_weight_decay = true;
  adamw.amsgrad = true;
  EXPECT_TRUE(close(run_adam(adamw), {0.477639973, -0.989370167, 1.86859846, 0.226250574}, rtol,
                    atol, "adamw amsgrad"));
  AdamArgs amax;
  amax.lr = 0.01;
  amax.maximize = true;
  EXPECT_TRUE(close(run_adam(amax), {0.50330323, -1.00014842, 2.02158785, 0.254298508}, rtol, atol,
                    "adam maximize"));
}

// Scalar reference in the parameter's precision T.
template <typename T>
void adam_ref(std::vector<T>& p, const std::vector<T>& g, std::vector<T>& m, std::vector<T>& v,
              std::vector<T>& vmax, const AdamArgs& a) {
  const double bc1 = 1 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bc2 = std::sqrt(1 - std::pow(a.beta2, static_cast<double>(a.step)));
  for (size_t i = 0; i < p.size(); ++i) {
    T gi = a.maximize ? -g[i] : g[i];
    if (a.weight_decay != 0 && !a.decoupled_weight_decay)
      gi += static_cast<T>(a.weight_decay) * p[i];
    if (a.decoupled_weight_decay) p[i] *= static_cast<T>(1 - a.lr * a.weight_decay);
    m[i] += static_cast<T>(1 - a.beta1) * (gi - m[i]);
    v[i] = v[i] * static_cast<T>(a.beta2) + static_cast<T>(1 - a.beta2) * gi * gi;
    T vd = v[i];
    if (a.amsgrad) vd = vmax[i] = std::max(vmax[i], v[i]);
    const T denom = std::sqrt(vd) / static_cast<T>(bc2) + static_cast<T>(a.eps);
    p[i] += static_cast<T>(-a.lr / bc1) * m[i] / denom;
  }
}

template <typename T>
void sgd_ref(std::vector<T>& p, const std::vector<T>& g, std::vector<T>& buf, const SgdArgs& a) {
  for (size_t i = 0; i < p.size(); ++i) {
    T gi = a.maximize ? -g[i] : g[i];
    gi += static_cast<T>(a.weight_decay) * p[i];
    if (a.momentum != 0) {
      buf[i] = a.first_step
                   ? gi
                   : buf[i] * static_cast<T>(a.momentum) + static_cast<T>(1 - a.dampening) * gi;
      gi = a.nesterov ? gi + static_cast<T>(a.momentum) * buf[i] : buf[i];
    }
    p[i] += static_cast<T>(-a.lr) * gi;
  }
}

template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return {v.begin(), v.end()};
}

template <typename T>
void multi_tensor_case(DType dt, uint64_t seed) {
  // One tensor spanning several chunks (parallel) plus small ones.
  const std::vector<int64_t> sizes = {70001, 3, 1, 1000};
  // FMA contraction may differ between the kernel and this loop; momentum sums can cancel.
  const double rtol = dt == DType::f64 ? 1e-12 : 1e-5, atol = dt == DType::f64 ? 1e-14 : 1e-6;
  for (bool adam : {false, true}) {
    std::vector<Tensor> ps, gs, ms, vs, vms;
    std::vector<std::vector<T>> rp, rm, rv, rvm;
    for (size_t t = 0; t < sizes.size(); ++t) {
      const int64_t n = sizes[t];
      rp.push_back(as<T>(rounded(uniform_values(n, seed + t, -1, 1), dt)));
      rm.push_back(std::vector<T>(static_cast<size_t>(n), T(0)));
      rv.push_back(std::vector<T>(static_cast<size_t>(n), T(0)));
      rvm.push_back(std::vector<T>(static_cast<size_t>(n), T(0)));
      ps.push_back(make({n}, {rp.back().begin(), rp.back().end()}, dt));
      ms.push_back(make({n}, std::vector<double>(static_cast<size_t>(n), 0.0), dt));
      vs.push_back(make({n}, std::vector<double>(static_cast<size_t>(n), 0.0), dt));
      vms.push_back(make({n}, std::vector<double>(static_cast<size_t>(n), 0.0), dt));
    }
    for (int64_t step = 1; step <= 4; ++step) {
      std::vector<Tensor> gs_step;
      for (size_t t = 0; t < sizes.size(); ++t) {
        const std::vector<double> g =
            rounded(uniform_values(sizes[t], seed * 7 + step * 13 + t, -2, 2), dt);
        gs_step.push_back(make({sizes[t]}, g, dt));
        if (adam) {
          AdamArgs a;
          a.lr = 1e-2;
          a.weight_decay = 0.05;
          a.decoupled_weight_decay = step % 2 == 0;  // exercise both forms
          a.amsgrad = true;
          a.step = step;
          adam_ref<T>(rp[t], as<T>(g), rm[t], rv[t], rvm[t], a);
        } else {
          SgdArgs s;
          s.lr = 0.05;
          s.momentum = 0.9;
          s.dampening = 0.2;
          s.weight_decay = 1e-3;
          s.nesterov = true;
          s.first_step = step == 1;
          sgd_ref<T>(rp[t], as<T>(g), rm[t], s);
        }
      }
      if (adam) {
        AdamArgs a;
        a.lr = 1e-2;
        a.weight_decay = 0.05;
        a.decoupled_weight_decay = step % 2 == 0;
        a.amsgrad = true;
        a.step = step;
        cpu().adam_step(ps, gs_step, ms, vs, vms, a);
      } else {
        SgdArgs s;
        s.lr = 0.05;
        s.momentum = 0.9;
        s.dampening = 0.2;
        s.weight_decay = 1e-3;
        s.nesterov = true;
        s.first_step = step == 1;
        cpu().sgd_step(ps, gs_step, ms, s);
      }
    }
    for (size_t t = 0; t < sizes.size(); ++t) {
      EXPECT_TRUE(close(read(ps[t]), {rp[t].begin(), rp[t].end()}, rtol, atol,
                        std::string(adam ? "adam" : "sgd") + " tensor " + std::to_string(t)));
      EXPECT_TRUE(close(read(ms[t]), {rm[t].begin(), rm[t].end()}, rtol, atol, "state"));
    }
  }
}

TEST(BackendOptimizer, MultiTensorStepsMatchScalarReference) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  multi_tensor_case<float>(DType::f32, seed);
  multi_tensor_case<double>(DType::f64, seed);
}

}  // namespace
}  // namespace gradus::backend_test
