// gradus against PyTorch: golden files written by tools/make_golden.py (committed; PyTorch is not
// needed here). Inputs and initial weights are float32; PyTorch's reference values were computed
// in float64 from them. Each check runs gradus in float64 (tight: only summation order differs)
// and in float32 (the format's tolerances).
//  - GoldenOps/<op>_<dtype>: outputs and input gradients of single ops.
//  - GoldenModel/<model>_<dtype>: one training step of a small MLP (784-32-10, batch 8) and of a
//    reduced benchmark CNN (conv-bn-relu-pool x2, linear-relu-linear; batch 2): loss, every
//    parameter gradient, BatchNorm running statistics, and the weights after one and two steps
//    of Adam and of SGD with momentum.
#include <cmath>
#include <functional>
#include <map>
#include <sstream>

#include "golden/golden_util.h"
#include "gradus/io/safetensors.h"
#include "gradus/nn/nn.h"
#include "gradus/optim/optim.h"
#include "support/test_util.h"

namespace gradus {
namespace {

using golden::close;
using golden::Tol;

std::string tag(DType t) {
  return t == DType::f64 ? "f64" : "f32";
}

// ------------------------------------------------------------------------------------- ops
struct GoldenOp {
  std::string name;
  std::vector<std::string> diff;     // inputs differentiated (the file has grad.<input>)
  std::vector<std::string> nondiff;  // other inputs (targets, class weights, running stats)
  std::function<Tensor(std::map<std::string, Tensor>&)> fn;
  double f32_scale = 1.0;  // loosens the float32 tolerance (with a reason at the entry)
};

std::vector<GoldenOp> make_golden_ops() {
  using M = std::map<std::string, Tensor>;
  auto ce = [](double smoothing, int64_t ignore, bool weighted, Reduction r) {
    return [=](M& x) {
      CrossEntropyOptions o;
      o.label_smoothing = smoothing;
      o.ignore_index = ignore;
      o.reduction = r;
      if (weighted) o.weight = x["weight"];
      return cross_entropy(x["logits"], x["target"], o);
    };
  };
  Conv2dOptions strided;
  strided.stride = {2, 2};
  strided.padding = {2, 2};
  strided.dilation = {2, 2};
  strided.groups = 2;
  Conv2dOptions pad1;
  pad1.padding = {1, 1};
  Pool2dOptions maxp;
  maxp.kernel_size = {3, 3};
  maxp.stride = {2, 2};
  maxp.padding = {1, 1};
  Pool2dOptions avgp = maxp;
  avgp.ceil_mode = true;
  avgp.count_include_pad = false;
  return {
      {"linear", {"x", "w", "b"}, {}, [](M& x) { return linear(x["x"], x["w"], x["b"]); }},
      {"linear_3d", {"x", "w", "b"}, {}, [](M& x) { return linear(x["x"], x["w"], x["b"]); }},
      {"conv2d",
       {"x", "w", "b"},
       {},
       [pad1](M& x) { return conv2d(x["x"], x["w"], x["b"], pad1); }},
      {"conv2d_s2_d2_g2",
       {"x", "w", "b"},
       {},
       [strided](M& x) { return conv2d(x["x"], x["w"], x["b"], strided); }},
      {"cross_entropy_smoothing",
       {"logits"},
       {"target", "weight"},
       ce(0.1, -100, false, Reduction::mean)},
      {"cross_entropy_weight_smoothing",
       {"logits"},
       {"target", "weight"},
       ce(0.2, -100, true, Reduction::mean)},
      {"cross_entropy_all", {"logits"}, {"target", "weight"}, ce(0.15, 2, true, Reduction::mean)},
      {"cross_entropy_none", {"logits"}, {"target", "weight"}, ce(0.1, 1, true, Reduction::none)},
      {"cross_entropy_4d", {"logits"}, {"target"}, ce(0.05, -100, false, Reduction::mean)},
      {"layer_norm",
       {"x", "w", "b"},
       {},
       [](M& x) { return layer_norm(x["x"], {8}, x["w"], x["b"], 1e-5); }},
      {"layer_norm_2d",
       {"x", "w", "b"},
       {},
       [](M& x) {
         return layer_norm(x["x"], {3, 4}, x["w"], x["b"], 1e-6);
       }},
      {"batch_norm_train",
       {"x", "w", "b"},
       {"running_mean", "running_var"},
       [](M& x) {
         // batch_norm updates the running stats in place: hand it copies, keep them for the
         // comparison with PyTorch's updated values.
         x["running_mean_after"] = x["running_mean"].clone();
         x["running_var_after"] = x["running_var"].clone();
         return batch_norm(x["x"], x["running_mean_after"], x["running_var_after"], x["w"], x["b"],
                           true, 0.1, 1e-5);
       }},
      {"max_pool2d", {"x"}, {}, [maxp](M& x) { return max_pool2d(x["x"], maxp); }},
      {"avg_pool2d", {"x"}, {}, [avgp](M& x) { return avg_pool2d(x["x"], avgp); }},
      {"softmax", {"x"}, {}, [](M& x) { return softmax(x["x"], 1); }},
      {"log_softmax", {"x"}, {}, [](M& x) { return log_softmax(x["x"], 0); }},
      {"gelu", {"x"}, {}, [](M& x) { return gelu(x["x"]); }},
      {"gelu_tanh", {"x"}, {}, [](M& x) { return gelu(x["x"], GeluApproximation::tanh); }},
      {"bce_with_logits",
       {"x"},
       {"t", "pw"},
       [](M& x) {
         return binary_cross_entropy_with_logits(x["x"], x["t"], Reduction::mean, x["pw"]);
       }},
      {"var_std",
       {"x"},
       {},
       [](M& x) {
         return stack({var(x["x"], {1}), std(x["x"], {1})});
       }},
  };
}

const std::vector<GoldenOp>& golden_ops() {
  static const std::vector<GoldenOp> ops = make_golden_ops();
  return ops;
}

struct OpParam {
  size_t index;
  DType dtype;
};

void PrintTo(const OpParam& p, std::ostream* os) {
  *os << golden_ops()[p.index].name << " " << tag(p.dtype);
}

class GoldenOps : public ::testing::TestWithParam<OpParam> {};

TEST_P(GoldenOps, MatchesPyTorch) {
  const GoldenOp& g = golden_ops()[GetParam().index];
  const DType dt = GetParam().dtype;
  const io::SafetensorsFile& file = golden::file("ops.safetensors");
  // float64: only the order of floating-point operations differs from PyTorch's float64 run.
  const Tol tol = dt == DType::f64 ? Tol{1e-9, 1e-12} : Tol{1e-5 * g.f32_scale, 1e-6 * g.f32_scale};

  std::map<std::string, Tensor> x;
  std::vector<Tensor> leaves;
  for (const std::string& n : g.diff) {
    Tensor t = file.at(g.name + "." + n).to(dt).detach();
    t.set_requires_grad(true);
    x[n] = t;
    leaves.push_back(t);
  }
  for (const std::string& n : g.nondiff) {
    const Tensor& t = file.at(g.name + "." + n);
    x[n] = is_floating(t.dtype()) ? t.to(dt).detach() : t;
  }
  const Tensor y = g.fn(x);
  EXPECT_EQ(y.dtype(), dt);
  EXPECT_TRUE(close(y, file.at(g.name + ".out"), tol, g.name + " output"));
  const Tensor grad_out = file.at(g.name + ".grad_out").to(dt);
  const std::vector<Tensor> grads = grad({y}, leaves, {grad_out});
  for (size_t i = 0; i < leaves.size(); ++i) {
    EXPECT_TRUE(close(grads[i], file.at(g.name + ".grad." + g.diff[i]), tol,
                      g.name + " gradient of " + g.diff[i]));
  }
  for (const char* stat : {"running_mean_after", "running_var_after"}) {
    if (x.count(stat)) {
      EXPECT_TRUE(close(x[stat], file.at(g.name + "." + stat), tol, g.name + " " + stat));
    }
  }
}

std::vector<OpParam> op_params() {
  std::vector<OpParam> p;
  for (size_t i = 0; i < golden_ops().size(); ++i) {
    p.push_back({i, DType::f64});
    p.push_back({i, DType::f32});
  }
  return p;
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenOps, ::testing::ValuesIn(op_params()),
                         [](const ::testing::TestParamInfo<OpParam>& info) {
                           return golden_ops()[info.param.index].name + "_" + tag(info.param.dtype);
                         });

// ---------------------------------------------------------------------------------- models
std::shared_ptr<nn::Module> build_mlp() {
  return std::make_shared<nn::MLP>(std::vector<int64_t>{784, 32, 10});
}

// The reduced benchmark CNN of make_golden.py (12x12 inputs; same indices as small_cnn()).
std::shared_ptr<nn::Module> build_cnn() {
  using std::make_shared;
  nn::ConvOptions pad1;
  pad1.padding = 1;
  auto s = make_shared<nn::Sequential>();
  s->push_back(make_shared<nn::Conv2d>(1, 8, 3, pad1));
  s->push_back(make_shared<nn::BatchNorm2d>(8));
  s->push_back(make_shared<nn::ReLU>());
  s->push_back(make_shared<nn::MaxPool2d>(2));
  s->push_back(make_shared<nn::Conv2d>(8, 16, 3, pad1));
  s->push_back(make_shared<nn::BatchNorm2d>(16));
  s->push_back(make_shared<nn::ReLU>());
  s->push_back(make_shared<nn::MaxPool2d>(2));
  s->push_back(make_shared<nn::Flatten>());
  s->push_back(make_shared<nn::Linear>(16 * 3 * 3, 32));
  s->push_back(make_shared<nn::ReLU>());
  s->push_back(make_shared<nn::Linear>(32, 10));
  return s;
}

struct ModelParam {
  std::string name;  // mlp / cnn (file <name>.safetensors)
  DType dtype;
};

void PrintTo(const ModelParam& p, std::ostream* os) {
  *os << p.name << " " << tag(p.dtype);
}

class GoldenModel : public ::testing::TestWithParam<ModelParam> {
 protected:
  const io::SafetensorsFile& file() const { return golden::file(GetParam().name + ".safetensors"); }
  DType dtype() const { return GetParam().dtype; }
  // Whole models in float32 against float64 PyTorch: rounding errors of ~10 chained ops, some of
  // them 784-long dot products, add up beyond the single-op 1e-5 relative bound.
  Tol tol() const { return dtype() == DType::f64 ? Tol{1e-8, 1e-11} : Tol{1e-4, 2e-6}; }

  // A model with the golden initial weights, in the test dtype, in training mode.
  std::shared_ptr<nn::Module> fresh_model() const {
    auto m = GetParam().name == "mlp" ? build_mlp() : build_cnn();
    nn::StateDict sd;
    const std::string prefix = "weights.";
    for (const auto& [name, t] : file().tensors) {
      if (name.rfind(prefix, 0) == 0) sd.insert(name.substr(prefix.size()), t);
    }
    m->load_state_dict(sd);
    m->to(dtype());
    m->train();
    return m;
  }
  Tensor loss_of(nn::Module& m) const {
    return cross_entropy(m.forward(file().at("input").to(dtype())), file().at("target"));
  }
};

TEST_P(GoldenModel, LossGradientsAndBuffers) {
  auto m = fresh_model();
  Tensor loss = loss_of(*m);
  EXPECT_TRUE(close(loss, file().at("loss"), tol(), "loss"));
  loss.backward();
  for (const auto& [name, p] : m->named_parameters()) {
    EXPECT_TRUE(close(p.grad(), file().at("grad." + name), tol(), "gradient of " + name));
  }
  for (const auto& [name, b] : m->named_buffers()) {
    const Tensor& expected = file().at("buffers." + name);
    EXPECT_TRUE(close(b, expected, is_floating(expected.dtype()) ? tol() : Tol{0, 0}, name));
  }
}

TEST_P(GoldenModel, AdamTwoSteps) {
  auto m = fresh_model();
  // Hyperparameters as in make_golden.py's OPTIMIZERS (also in the file's metadata).
  optim::AdamOptions o;
  o.lr = 1e-2;
  o.betas = {0.9, 0.999};
  o.eps = 1e-8;
  o.weight_decay = 1e-3;
  optim::Adam opt(m->parameters(), o);
  // Adam divides each gradient element by its own magnitude. Where that is ~0 in float32 (the
  // conv bias before a BatchNorm has an exactly-zero true gradient, float32 leaves ~1e-9 of
  // noise) or where it cancels against weight decay, rounding moves the update by up to ~1e-3 of
  // lr (1e-2): 2e-5 absolute. Float64 stays tight and catches any difference in the formula.
  const Tol weights_tol = dtype() == DType::f64 ? tol() : Tol{1e-4, 2e-5};
  for (int step = 1; step <= 2; ++step) {
    opt.zero_grad();
    Tensor loss = loss_of(*m);
    if (step == 2) {
      EXPECT_TRUE(close(loss, file().at("adam.loss2"), tol(), "loss at step 2"));
    }
    loss.backward();
    opt.step();
    for (const auto& [name, p] : m->named_parameters()) {
      const std::string key = "adam.step" + std::to_string(step) + "." + name;
      EXPECT_TRUE(close(p, file().at(key), weights_tol, key));
    }
  }
}

TEST_P(GoldenModel, SgdMomentumTwoSteps) {
  auto m = fresh_model();
  optim::SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.dampening = 0.0;
  o.weight_decay = 5e-4;
  o.nesterov = false;
  optim::SGD opt(m->parameters(), o);
  for (int step = 1; step <= 2; ++step) {
    opt.zero_grad();
    Tensor loss = loss_of(*m);
    if (step == 2) {
      EXPECT_TRUE(close(loss, file().at("sgd.loss2"), tol(), "loss at step 2"));
    }
    loss.backward();
    opt.step();
    for (const auto& [name, p] : m->named_parameters()) {
      const std::string key = "sgd.step" + std::to_string(step) + "." + name;
      EXPECT_TRUE(close(p, file().at(key), tol(), key));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenModel,
                         ::testing::Values(ModelParam{"mlp", DType::f64},
                                           ModelParam{"mlp", DType::f32},
                                           ModelParam{"cnn", DType::f64},
                                           ModelParam{"cnn", DType::f32}),
                         [](const ::testing::TestParamInfo<ModelParam>& info) {
                           return info.param.name + "_" + tag(info.param.dtype);
                         });

// The golden files themselves: present, from the generator, and small.
TEST(GoldenFiles, ComeFromTheGeneratorScript) {
  for (const char* f : {"ops.safetensors", "mlp.safetensors", "cnn.safetensors"}) {
    const io::SafetensorsFile& file = golden::file(f);
    ASSERT_TRUE(file.metadata.count("source")) << f;
    EXPECT_EQ(file.metadata.at("source"), "tools/make_golden.py") << f;
    EXPECT_FALSE(file.tensors.empty()) << f;
  }
}

}  // namespace
}  // namespace gradus
