// SGD / Adam / AdamW against scalar float64 loops of PyTorch's update formulas, over several
// steps and hyperparameter combinations; state handling, validation and checkpoint round trips.
#include <cmath>

#include "support/test_util.h"

namespace gradus {
namespace {

using testing::all_close;
using testing::fresh_seed;
using testing::random_tensor;
using testing::values_of;

// ---------------------------------------------------------------------------- scalar references
struct Ref {
  std::vector<double> p, buf, m, v, vmax;
  bool has_buf = false;
  int64_t step = 0;
  explicit Ref(const Tensor& t) : p(values_of(t)) {
    buf = m = v = vmax = std::vector<double>(p.size(), 0.0);
  }
};

void ref_sgd(Ref& r, const std::vector<double>& grad, const optim::SGDOptions& o) {
  for (size_t i = 0; i < r.p.size(); ++i) {
    double g = o.maximize ? -grad[i] : grad[i];
    g += o.weight_decay * r.p[i];
    if (o.momentum != 0) {
      r.buf[i] = r.has_buf ? o.momentum * r.buf[i] + (1 - o.dampening) * g : g;
      g = o.nesterov ? g + o.momentum * r.buf[i] : r.buf[i];
    }
    r.p[i] -= o.lr * g;
  }
  r.has_buf = true;
  ++r.step;
}

void ref_adam(Ref& r, const std::vector<double>& grad, const optim::AdamOptions& o,
              bool decoupled) {
  ++r.step;
  const double b1 = o.betas.first, b2 = o.betas.second;
  const double bc1 = 1 - std::pow(b1, static_cast<double>(r.step));
  const double bc2 = 1 - std::pow(b2, static_cast<double>(r.step));
  for (size_t i = 0; i < r.p.size(); ++i) {
    double g = o.maximize ? -grad[i] : grad[i];
    if (o.weight_decay != 0) {
      if (decoupled) {
        r.p[i] *= 1 - o.lr * o.weight_decay;
      } else {
        g += o.weight_decay * r.p[i];
      }
    }
    r.m[i] = b1 * r.m[i] + (1 - b1) * g;
    r.v[i] = b2 * r.v[i] + (1 - b2) * g * g;
    double vhat = r.v[i];
    if (o.amsgrad) {
      r.vmax[i] = std::max(r.vmax[i], r.v[i]);
      vhat = r.vmax[i];
    }
    const double denom = std::sqrt(vhat) / std::sqrt(bc2) + o.eps;
    r.p[i] -= o.lr / bc1 * r.m[i] / denom;
  }
}

std::vector<Tensor> make_params(DType dtype, uint64_t seed) {
  std::vector<Tensor> ps;
  const std::vector<Shape> shapes = {{4, 3}, {5}, {2, 2, 2}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor p = random_tensor(shapes[i], seed + i, -1, 1, dtype);
    p.set_requires_grad(true);
    ps.push_back(p);
  }
  return ps;
}

double rtol_for(DType t) {
  return t == DType::f64 ? 1e-10 : 2e-5;
}
double atol_for(DType t) {
  return t == DType::f64 ? 1e-12 : 2e-6;
}

// Runs `steps` optimizer steps with fresh random gradients and compares against the reference
// after every step. `ref_step` applies the reference update to one parameter.
template <typename MakeOpt, typename RefStep>
void run_against_reference(DType dtype, int steps, MakeOpt make_opt, RefStep ref_step) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " dtype " << dtype_name(dtype));
  std::vector<Tensor> params = make_params(dtype, seed);
  std::vector<Ref> refs;
  for (const Tensor& p : params) refs.emplace_back(p);
  auto opt = make_opt(params);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor g = random_tensor(params[i].sizes(), seed + 100 * (s + 1) + i, -1, 1, dtype);
      params[i].set_grad(g);
      ref_step(refs[i], values_of(g));
    }
    const uint64_t version = params[0].version();
    opt->step();
    EXPECT_GT(params[0].version(), version) << "step must bump the version counter";
    for (size_t i = 0; i < params.size(); ++i) {
      ASSERT_TRUE(all_close(params[i], tensor(refs[i].p, params[i].sizes(), {.dtype = DType::f64}),
                            rtol_for(dtype), atol_for(dtype)))
          << "param " << i << " after step " << s + 1;
    }
  }
}

// ----------------------------------------------------------------------------------------- SGD
TEST(SGD, MatchesReferenceForEveryOptionCombination) {
  const std::vector<optim::SGDOptions> configs = {
      {.lr = 0.1},
      {.lr = 0.05, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.3},
      {.lr = 0.05, .momentum = 0.8, .nesterov = true},
      {.lr = 0.02, .momentum = 0.9, .weight_decay = 0.1},
      {.lr = 0.02, .momentum = 0.7, .weight_decay = 0.05, .nesterov = true, .maximize = true},
      {.lr = 0.3, .weight_decay = 0.01, .maximize = true},
  };
  for (DType dtype : {DType::f64, DType::f32}) {
    for (size_t c = 0; c < configs.size(); ++c) {
      SCOPED_TRACE(::testing::Message() << "config " << c);
      const optim::SGDOptions o = configs[c];
      run_against_reference(
          dtype, 5, [&](std::vector<Tensor> ps) { return std::make_unique<optim::SGD>(ps, o); },
          [&](Ref& r, const std::vector<double>& g) { ref_sgd(r, g, o); });
    }
  }
}

// -------------------------------------------------------------------------------- Adam / AdamW
TEST(Adam, MatchesReferenceForEveryOptionCombination) {
  const std::vector<optim::AdamOptions> configs = {
      {},
      {.lr = 0.01, .betas = {0.8, 0.99}, .eps = 1e-6},
      {.lr = 0.01, .weight_decay = 0.1},
      {.lr = 0.005, .amsgrad = true},
      {.lr = 0.01, .betas = {0.5, 0.9}, .weight_decay = 0.05, .amsgrad = true, .maximize = true},
  };
  for (DType dtype : {DType::f64, DType::f32}) {
    for (size_t c = 0; c < configs.size(); ++c) {
      SCOPED_TRACE(::testing::Message() << "config " << c);
      const optim::AdamOptions o = configs[c];
      run_against_reference(
          dtype, 6, [&](std::vector<Tensor> ps) { return std::make_unique<optim::Adam>(ps, o); },
          [&](Ref& r, const std::vector<double>& g) { ref_adam(r, g, o, false); });
    }
  }
}

TEST(AdamW, MatchesReferenceWithDecoupledWeightDecay) {
  const std::vector<optim::AdamWOptions> configs = {
      {},  // weight_decay defaults to 0.01
      {.lr = 0.02, .weight_decay = 0.2},
      {.lr = 0.01, .betas = {0.7, 0.95}, .weight_decay = 0.1, .amsgrad = true},
      {.lr = 0.01, .weight_decay = 0.1, .maximize = true},
  };
  EXPECT_EQ(optim::AdamWOptions{}.weight_decay, 0.01);
  for (DType dtype : {DType::f64, DType::f32}) {
    for (size_t c = 0; c < configs.size(); ++c) {
      SCOPED_TRACE(::testing::Message() << "config " << c);
      const optim::AdamWOptions w = configs[c];
      const optim::AdamOptions o{w.lr, w.betas, w.eps, w.weight_decay, w.amsgrad, w.maximize};
      run_against_reference(
          dtype, 6, [&](std::vector<Tensor> ps) { return std::make_unique<optim::AdamW>(ps, w); },
          [&](Ref& r, const std::vector<double>& g) { ref_adam(r, g, o, true); });
    }
  }
}

// ------------------------------------------------------------------------------ state handling
TEST(Optimizer, SkipsParamsWithoutGradAndKeepsPerParamSteps) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  // SGD with momentum: b has no grad on step 1, so on step 2 it takes the first-step path while
  // a does not (two buckets in one step).
  {
    std::vector<Tensor> ps = make_params(DType::f64, seed);
    const optim::SGDOptions o{.lr = 0.1, .momentum = 0.9, .dampening = 0.5};
    optim::SGD opt(ps, o);
    Ref ra(ps[0]), rb(ps[1]);
    const std::vector<double> b0 = values_of(ps[1]);
    const Tensor g1 = random_tensor(ps[0].sizes(), seed + 10);
    ps[0].set_grad(g1);
    ref_sgd(ra, values_of(g1), o);
    opt.step();
    EXPECT_EQ(values_of(ps[1]), b0);
    EXPECT_EQ(opt.state(0, 1).tensors.count("momentum_buffer"), 0u);
    const Tensor g2a = random_tensor(ps[0].sizes(), seed + 11),
                 g2b = random_tensor(ps[1].sizes(), seed + 12);
    ps[0].set_grad(g2a);
    ps[1].set_grad(g2b);
    ref_sgd(ra, values_of(g2a), o);
    ref_sgd(rb, values_of(g2b), o);
    opt.step();
    EXPECT_TRUE(all_close(ps[0], tensor(ra.p, ps[0].sizes(), {.dtype = DType::f64}), 1e-12, 1e-14));
    EXPECT_TRUE(all_close(ps[1], tensor(rb.p, ps[1].sizes(), {.dtype = DType::f64}), 1e-12, 1e-14));
  }
  // Adam: bias correction follows each parameter's own step count.
  {
    std::vector<Tensor> ps = make_params(DType::f64, seed + 1000);
    const optim::AdamOptions o{.lr = 0.01};
    optim::Adam opt(ps, o);
    Ref ra(ps[0]), rb(ps[1]);
    for (int s = 0; s < 3; ++s) {
      const Tensor ga = random_tensor(ps[0].sizes(), seed + 20 + s);
      ps[0].set_grad(ga);
      ref_adam(ra, values_of(ga), o, false);
      if (s == 2) {
        const Tensor gb = random_tensor(ps[1].sizes(), seed + 30);
        ps[1].set_grad(gb);
        ref_adam(rb, values_of(gb), o, false);
      }
      opt.step();
    }
    EXPECT_EQ(opt.state(0, 0).step, 3);
    EXPECT_EQ(opt.state(0, 1).step, 1);
    EXPECT_EQ(opt.state(0, 2).step, 0);
    EXPECT_TRUE(all_close(ps[0], tensor(ra.p, ps[0].sizes(), {.dtype = DType::f64}), 1e-10, 1e-12));
    EXPECT_TRUE(all_close(ps[1], tensor(rb.p, ps[1].sizes(), {.dtype = DType::f64}), 1e-10, 1e-12));
  }
}

TEST(Optimizer, NonContiguousParameterIsUpdatedInPlace) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  Tensor base = random_tensor({3, 4}, seed);
  Tensor p = base.t();  // [4, 3] view with strides (1, 4)
  ASSERT_FALSE(p.is_contiguous());
  p.set_requires_grad(true);
  const optim::SGDOptions o{.lr = 0.1, .momentum = 0.5};
  optim::SGD opt({p}, o);
  Ref r(p);
  for (int s = 0; s < 3; ++s) {
    const Tensor g = random_tensor({4, 3}, seed + s + 1);
    p.set_grad(g);
    ref_sgd(r, values_of(g), o);
    opt.step();
  }
  EXPECT_TRUE(all_close(p, tensor(r.p, {4, 3}, {.dtype = DType::f64}), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(base, tensor(r.p, {4, 3}, {.dtype = DType::f64}).t(), 1e-12, 1e-14));
}

TEST(Optimizer, ParamGroupsLrAndZeroGrad) {
  const uint64_t seed = fresh_seed();
  std::vector<Tensor> ps = make_params(DType::f64, seed);
  optim::SGD opt(std::vector<optim::ParamGroup<optim::SGDOptions>>{{{ps[0], ps[1]}, {.lr = 0.1}},
                                                                   {{ps[2]}, {.lr = 0.01}}});
  EXPECT_EQ(opt.num_param_groups(), 2u);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);
  EXPECT_DOUBLE_EQ(opt.group_lr(1), 0.01);
  const std::vector<double> p0 = values_of(ps[0]), p2 = values_of(ps[2]);
  const Tensor g0 = random_tensor(ps[0].sizes(), seed + 1),
               g2 = random_tensor(ps[2].sizes(), seed + 2);
  ps[0].set_grad(g0);
  ps[2].set_grad(g2);
  opt.step();
  const auto a = values_of(ps[0]), c = values_of(ps[2]), ga = values_of(g0), gc = values_of(g2);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], p0[i] - 0.1 * ga[i], 1e-14);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], p2[i] - 0.01 * gc[i], 1e-14);
  opt.set_lr(0.5);
  EXPECT_DOUBLE_EQ(opt.group_lr(0), 0.5);
  EXPECT_DOUBLE_EQ(opt.group_lr(1), 0.5);

  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(values_of(ps[0].grad()), std::vector<double>(12, 0.0));
  opt.zero_grad();
  EXPECT_FALSE(ps[0].grad().defined());
  EXPECT_FALSE(ps[2].grad().defined());
}

TEST(Optimizer, FollowsModuleToDtype) {
  const uint64_t seed = fresh_seed();
  manual_seed(seed);
  nn::Linear lin(3, 2);
  const optim::SGDOptions o{.lr = 0.1, .momentum = 0.9};
  optim::SGD opt(lin.parameters(), o);
  Ref r(lin.weight);
  Tensor g = random_tensor({2, 3}, seed + 1, -1, 1, DType::f32);
  lin.weight.set_grad(g);
  ref_sgd(r, values_of(g), o);
  opt.step();
  lin.to(DType::f64);  // the optimizer holds the same handles
  g = random_tensor({2, 3}, seed + 2);
  lin.weight.set_grad(g);
  ref_sgd(r, values_of(g), o);
  opt.step();
  EXPECT_EQ(opt.state(0, 0).tensors.at("momentum_buffer").dtype(), DType::f64);
  EXPECT_TRUE(all_close(lin.weight, tensor(r.p, {2, 3}, {.dtype = DType::f64}), 1e-6, 1e-7));
}

TEST(Optimizer, ValidatesHyperparametersAndParams) {
  std::vector<Tensor> ps = make_params(DType::f32, fresh_seed());
  // (Extra parentheses: the braced options contain commas, which would split macro arguments.)
  EXPECT_THROW((optim::SGD(ps, {.lr = -0.1})), ValueError);
  EXPECT_THROW((optim::SGD(ps, {.lr = 0.1, .momentum = -1})), ValueError);
  EXPECT_THROW((optim::SGD(ps, {.lr = 0.1, .weight_decay = -1})), ValueError);
  EXPECT_THROW((optim::SGD(ps, {.lr = 0.1, .nesterov = true})), ValueError);
  EXPECT_THROW((optim::SGD(ps, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true})),
               ValueError);
  EXPECT_THROW((optim::Adam(ps, {.lr = -1e-3})), ValueError);
  EXPECT_THROW((optim::Adam(ps, {.betas = {1.0, 0.999}})), ValueError);
  EXPECT_THROW((optim::Adam(ps, {.betas = {0.9, -0.1}})), ValueError);
  EXPECT_THROW((optim::Adam(ps, {.eps = -1})), ValueError);
  EXPECT_THROW((optim::AdamW(ps, {.weight_decay = -0.01})), ValueError);
  EXPECT_THROW((optim::SGD(std::vector<Tensor>{}, {})), ValueError);
  EXPECT_THROW((optim::SGD({ps[0], ps[1], ps[0]}, {})), ValueError);
  EXPECT_THROW((optim::SGD({zeros({2}, {.dtype = DType::i64})}, {})), DTypeError);
  try {
    optim::Adam bad(ps, {.betas = {0.9, 1.5}});
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("index 1"), std::string::npos) << e.what();
  }
  optim::SGD ok(ps, {.lr = 0.1});
  EXPECT_THROW(ok.set_lr(-1), ValueError);
  EXPECT_DOUBLE_EQ(ok.lr(), 0.1);
}

// ---------------------------------------------------------------------------------- state_dict
TEST(Optimizer, StateDictRoundTripResumesExactly) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  std::vector<Tensor> ps = make_params(DType::f32, seed);
  optim::Adam opt(ps, {.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
  auto grads_at = [&](int s) {
    std::vector<Tensor> gs;
    for (size_t i = 0; i < ps.size(); ++i)
      gs.push_back(random_tensor(ps[i].sizes(), seed + 50 * s + i, -1, 1, DType::f32));
    return gs;
  };
  for (int s = 0; s < 3; ++s) {
    auto gs = grads_at(s);
    for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(gs[i]);
    opt.step();
  }
  const optim::OptimizerState sd = opt.state_dict();
  EXPECT_EQ(sd.type, "Adam");
  EXPECT_EQ(sd.scalars.at("state.0.step"), 3);
  EXPECT_EQ(sd.scalars.at("state.2.step"), 3);
  EXPECT_EQ(sd.scalars.at("param_groups.0.lr"), 0.01);
  EXPECT_EQ(sd.scalars.at("param_groups.0.amsgrad"), 1);
  EXPECT_EQ(sd.scalars.at("param_groups.0.num_params"), 3);
  EXPECT_EQ(sd.tensors.size(), 9u);  // exp_avg, exp_avg_sq, max_exp_avg_sq per param
  EXPECT_EQ(sd.tensors.at("state.1.exp_avg").sizes(), (Shape{5}));

  std::vector<Tensor> qs;
  for (const Tensor& p : ps) {
    Tensor q = p.detach().clone();
    q.set_requires_grad(true);
    qs.push_back(q);
  }
  optim::Adam resumed(qs, {.lr = 0.5});
  resumed.load_state_dict(sd);
  EXPECT_DOUBLE_EQ(resumed.lr(), 0.01);
  EXPECT_TRUE(resumed.options().amsgrad);
  for (int s = 3; s < 5; ++s) {
    auto gs = grads_at(s);
    for (size_t i = 0; i < ps.size(); ++i) {
      ps[i].set_grad(gs[i]);
      qs[i].set_grad(gs[i].clone());
    }
    opt.step();
    resumed.step();
  }
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(values_of(qs[i]), values_of(ps[i])) << i;

  // Mismatches are rejected without changing anything.
  optim::SGD sgd(qs, {.lr = 0.1});
  EXPECT_THROW(sgd.load_state_dict(sd), ValueError);
  optim::Adam fewer({qs[0], qs[1]}, {});
  EXPECT_THROW(fewer.load_state_dict(sd), ValueError);
  optim::OptimizerState wrong = sd;
  wrong.tensors["state.1.exp_avg"] = zeros({6});
  optim::Adam victim(qs, {.lr = 0.5});
  EXPECT_THROW(victim.load_state_dict(wrong), ShapeError);
  EXPECT_DOUBLE_EQ(victim.lr(), 0.5);
  wrong = sd;
  wrong.scalars["param_groups.0.beta1"] = 1.5;
  EXPECT_THROW(victim.load_state_dict(wrong), ValueError);
  EXPECT_DOUBLE_EQ(victim.lr(), 0.5);
  EXPECT_EQ(victim.state(0, 0).step, 0);
}

}  // namespace
}  // namespace gradus
