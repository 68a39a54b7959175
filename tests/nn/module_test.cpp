// nn::Module: names identical to PyTorch's state_dict, counts, state dict loading, placement,
// modes, freezing and printing.
#include <set>

#include "support/test_util.h"

namespace gradus {
namespace {

using testing::fresh_seed;
using testing::random_tensor;
using testing::values_of;

std::vector<std::string> keys_of(const nn::StateDict& sd) {
  return sd.keys();
}

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& item : named) out.push_back(item.first);
  return out;
}

// ------------------------------------------------------------------------------- state_dict names
// Expected lists written from PyTorch's naming rules: nn.Sequential children are "0", "1", ...;
// each module lists its parameters, then its buffers, then its children.
TEST(ModuleNames, MlpMatchesPyTorchSequential) {
  nn::MLP mlp({784, 256, 128, 10});
  const std::vector<std::string> expected = {"0.weight", "0.bias",   "2.weight",
                                             "2.bias",   "4.weight", "4.bias"};
  EXPECT_EQ(keys_of(mlp.state_dict()), expected);
  EXPECT_EQ(names_of(mlp.named_parameters()), expected);
  EXPECT_TRUE(mlp.named_buffers().empty());
  const auto sd = mlp.state_dict();
  EXPECT_EQ(sd.at("0.weight").sizes(), (Shape{256, 784}));
  EXPECT_EQ(sd.at("2.weight").sizes(), (Shape{128, 256}));
  EXPECT_EQ(sd.at("4.bias").sizes(), (Shape{10}));
}

TEST(ModuleNames, MlpWithDropoutShiftsIndices) {
  nn::MLP mlp({20, 16, 8, 4}, "gelu", 0.25);
  const std::vector<std::string> expected = {"0.weight", "0.bias",   "3.weight",
                                             "3.bias",   "6.weight", "6.bias"};
  EXPECT_EQ(keys_of(mlp.state_dict()), expected);
  EXPECT_EQ(mlp.size(), 7u);  // Linear GELU Dropout Linear GELU Dropout Linear
  EXPECT_NE(std::dynamic_pointer_cast<nn::Dropout>(mlp[2]), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<nn::GELU>(mlp[1]), nullptr);
}

TEST(ModuleNames, SmallCnnMatchesPyTorch) {
  auto cnn = nn::small_cnn();
  const std::vector<std::string> expected = {"0.weight",
                                             "0.bias",
                                             "1.weight",
                                             "1.bias",
                                             "1.running_mean",
                                             "1.running_var",
                                             "1.num_batches_tracked",
                                             "4.weight",
                                             "4.bias",
                                             "5.weight",
                                             "5.bias",
                                             "5.running_mean",
                                             "5.running_var",
                                             "5.num_batches_tracked",
                                             "9.weight",
                                             "9.bias",
                                             "11.weight",
                                             "11.bias"};
  EXPECT_EQ(keys_of(cnn->state_dict()), expected);
  const std::vector<std::string> buffers = {"1.running_mean",        "1.running_var",
                                            "1.num_batches_tracked", "5.running_mean",
                                            "5.running_var",         "5.num_batches_tracked"};
  EXPECT_EQ(names_of(cnn->named_buffers()), buffers);
  const auto sd = cnn->state_dict();
  EXPECT_EQ(sd.at("0.weight").sizes(), (Shape{32, 1, 3, 3}));
  EXPECT_EQ(sd.at("4.weight").sizes(), (Shape{64, 32, 3, 3}));
  EXPECT_EQ(sd.at("9.weight").sizes(), (Shape{128, 3136}));
  EXPECT_EQ(sd.at("11.weight").sizes(), (Shape{10, 128}));
  EXPECT_EQ(sd.at("1.num_batches_tracked").dtype(), DType::i64);
  EXPECT_EQ(sd.at("1.num_batches_tracked").dim(), 0);
}

TEST(ModuleNames, BenchCnnMatchesPyTorch) {
  auto cnn = nn::bench_cnn();
  const std::vector<std::string> expected = {"0.weight", "0.bias", "3.weight", "3.bias",
                                             "7.weight", "7.bias", "9.weight", "9.bias"};
  EXPECT_EQ(keys_of(cnn->state_dict()), expected);
}

TEST(ModuleNames, NestedModulesUseDottedPaths) {
  struct Net : nn::Module {
    std::shared_ptr<nn::Sequential> features;
    std::shared_ptr<nn::Linear> head;
    Net() {
      features = register_module(
          "features",
          std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
              std::make_shared<nn::Conv2d>(3, 4, 3), std::make_shared<nn::BatchNorm2d>(4)}));
      head = register_module("head", std::make_shared<nn::Linear>(4, 2));
      register_buffer("scale", ones({1}));
    }
  };
  auto net = std::make_shared<Net>();
  const std::vector<std::string> expected = {"scale",
                                             "features.0.weight",
                                             "features.0.bias",
                                             "features.1.weight",
                                             "features.1.bias",
                                             "features.1.running_mean",
                                             "features.1.running_var",
                                             "features.1.num_batches_tracked",
                                             "head.weight",
                                             "head.bias"};
  EXPECT_EQ(keys_of(net->state_dict()), expected);
  std::vector<std::string> modules;
  for (const auto& [name, m] : net->named_modules()) modules.push_back(name);
  EXPECT_EQ(modules,
            (std::vector<std::string>{"", "features", "features.0", "features.1", "head"}));
  EXPECT_EQ(net->named_modules()[0].second.get(), net.get());
  EXPECT_EQ(net->children().size(), 2u);
  EXPECT_EQ(net->type_name(), "Net");
  EXPECT_EQ(net->parameters(/*recurse=*/false).size(), 0u);
  EXPECT_EQ(net->buffers(/*recurse=*/false).size(), 1u);
}

TEST(ModuleNames, TiedParametersListedOnceButSavedUnderBothNames) {
  // Registering the very same handle twice ties the parameters.
  struct Shared : nn::Module {
    Shared() {
      Tensor w = register_parameter("a", randn({3, 3}));
      register_parameter("b", w);
    }
  };
  Shared s;
  EXPECT_EQ(s.parameters().size(), 1u);
  EXPECT_EQ(s.state_dict().size(), 2u);
  EXPECT_EQ(s.num_parameters(), 9);
}

TEST(ModuleNames, RegistrationErrors) {
  nn::Linear lin(2, 3);
  EXPECT_THROW(lin.register_parameter("weight", zeros({1})), ValueError);
  EXPECT_THROW(lin.register_buffer("a.b", zeros({1})), ValueError);
  EXPECT_THROW(lin.register_parameter("", zeros({1})), ValueError);
  EXPECT_THROW(lin.register_parameter("x", Tensor()), ValueError);
  EXPECT_THROW(lin.register_module("bias", std::make_shared<nn::ReLU>()), ValueError);
  EXPECT_THROW(lin.register_module<nn::ReLU>("relu", nullptr), ValueError);
  nn::ModuleList list;
  EXPECT_THROW(list.forward(zeros({1})), Error);
}

// ------------------------------------------------------------------------------------- counts
TEST(ModuleCounts, FactoryModels) {
  EXPECT_EQ(nn::make_model("mlp-large")->num_parameters(),
            784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10);
  EXPECT_EQ(nn::make_model("mlp")->num_parameters(),
            784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(nn::make_model("mlp-bench")->num_parameters(), 784 * 128 + 128 + 128 * 10 + 10);
  const int64_t bench = 32 * 1 * 9 + 32 + 64 * 32 * 9 + 64 + 3136 * 128 + 128 + 128 * 10 + 10;
  EXPECT_EQ(nn::make_model("cnn-bench")->num_parameters(), bench);
  EXPECT_EQ(nn::make_model("cnn")->num_parameters(), bench + 2 * 32 + 2 * 64);
  // CIFAR-10 shaped input: 3 channels, 32x32 -> 64 * 8 * 8 features.
  auto cifar = nn::make_model("cnn-bench", {.in_channels = 3, .image_size = 32, .num_classes = 10});
  EXPECT_EQ(cifar->state_dict().at("7.weight").sizes(), (Shape{128, 4096}));
  EXPECT_EQ(cifar->state_dict().at("0.weight").sizes(), (Shape{32, 3, 3, 3}));
  try {
    nn::make_model("resnet-9000");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cnn-bench"), std::string::npos) << e.what();
  }
}

// ----------------------------------------------------------------------------- load_state_dict
TEST(ModuleLoad, RoundTripCopiesValuesIntoTheSameHandles) {
  manual_seed(fresh_seed());
  auto a = nn::small_cnn();
  auto b = nn::small_cnn();
  {
    NoGradGuard g;
    Tensor rm = a->state_dict().at("1.running_mean"),
           nbt = a->state_dict().at("5.num_batches_tracked");
    rm.copy_(random_tensor({32}, fresh_seed(), -1, 1, DType::f32));
    nbt.fill_(7);
  }
  const std::vector<Tensor> handles = b->parameters();
  const nn::LoadResult r = b->load_state_dict(a->state_dict());
  EXPECT_TRUE(r.ok());
  const auto sa = a->state_dict(), sb = b->state_dict();
  for (const auto& [name, t] : sa) {
    EXPECT_EQ(values_of(sb.at(name)), values_of(t)) << name;
    EXPECT_FALSE(sb.at(name).same(t)) << name << " must be copied, not aliased";
  }
  const std::vector<Tensor> after = b->parameters();
  for (size_t i = 0; i < handles.size(); ++i) EXPECT_TRUE(after[i].same(handles[i]));
  EXPECT_EQ(sb.at("5.num_batches_tracked").item<int64_t>(), 7);
}

TEST(ModuleLoad, StrictListsEveryProblemInOneErrorAndLoadsNothing) {
  nn::MLP model({8, 6, 4});
  nn::MLP other({8, 5, 4});  // 0.weight [5, 8], 0.bias [5], 2.weight [4, 5] mismatch
  std::vector<std::pair<std::string, Tensor>> items;
  for (const auto& [k, v] : other.state_dict())
    if (k != "2.bias") items.emplace_back(k, v);  // missing 2.bias
  items.emplace_back("3.weight", zeros({2}));     // unexpected
  const nn::StateDict bad(items);
  const std::vector<double> before = values_of(model.state_dict().at("0.weight"));
  try {
    model.load_state_dict(bad);
    FAIL() << "expected ValueError";
  } catch (const ShapeError&) {
    FAIL() << "missing/unexpected keys must raise ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    for (const char* needle : {"\"2.bias\"", "\"3.weight\"", "0.weight", "0.bias", "2.weight",
                               "[5, 8]", "[6, 8]", "missing", "unexpected"}) {
      EXPECT_NE(msg.find(needle), std::string::npos) << needle << " not in: " << msg;
    }
  }
  EXPECT_EQ(values_of(model.state_dict().at("0.weight")), before);

  // Only shapes wrong -> ShapeError.
  EXPECT_THROW(model.load_state_dict(other.state_dict()), ShapeError);

  // Non-strict: loads what matches, reports the rest.
  nn::MLP same({8, 6, 4});
  std::vector<std::pair<std::string, Tensor>> partial;
  for (const auto& [k, v] : same.state_dict())
    if (k != "0.bias") partial.emplace_back(k, k == "2.weight" ? zeros({4, 7}) : v);
  partial.emplace_back("extra", zeros({1}));
  const nn::LoadResult r = model.load_state_dict(nn::StateDict(partial), /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"0.bias"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"extra"}));
  ASSERT_EQ(r.mismatched_keys.size(), 1u);
  EXPECT_NE(r.mismatched_keys[0].find("2.weight"), std::string::npos);
  EXPECT_EQ(values_of(model.state_dict().at("0.weight")),
            values_of(same.state_dict().at("0.weight")));
}

TEST(ModuleLoad, AcceptsStdMapAndCastsDtype) {
  nn::Linear lin(3, 2);
  std::map<std::string, Tensor> m;
  const Tensor w = random_tensor({2, 3}, fresh_seed());  // f64 source into an f32 model
  m["weight"] = w;
  m["bias"] = random_tensor({2}, fresh_seed());
  lin.load_state_dict(m);
  EXPECT_EQ(lin.weight.dtype(), DType::f32);
  EXPECT_TRUE(testing::all_close(lin.weight, w.to(DType::f32), 0, 0));
}

// ---------------------------------------------------------------------------------- placement
TEST(ModulePlacement, ToF64KeepsParameterIdentity) {
  manual_seed(fresh_seed());
  auto cnn = nn::small_cnn();
  const std::vector<Tensor> params = cnn->parameters();
  std::vector<std::vector<double>> values;
  for (const Tensor& p : params) values.push_back(values_of(p));
  params[0].set_grad(ones(params[0].sizes()));
  cnn->to(DType::f64);
  const std::vector<Tensor> after = cnn->parameters();
  ASSERT_EQ(after.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(after[i].same(params[i]));
    EXPECT_EQ(params[i].dtype(), DType::f64);
    EXPECT_TRUE(params[i].requires_grad());
    EXPECT_EQ(values_of(params[i]), values[i]);  // f32 -> f64 is exact
  }
  EXPECT_EQ(params[0].grad().dtype(), DType::f64);
  const auto sd = cnn->state_dict();
  EXPECT_EQ(sd.at("1.running_var").dtype(), DType::f64);
  EXPECT_EQ(sd.at("1.num_batches_tracked").dtype(), DType::i64);
  EXPECT_THROW(cnn->to(DType::i32), DTypeError);
  cnn->to(Device::cpu());  // no-op
  EXPECT_TRUE(cnn->parameters()[0].same(params[0]));
}

// ------------------------------------------------------------------------ modes, grads, freezing
TEST(ModuleModes, TrainEvalIsRecursive) {
  auto cnn = nn::small_cnn();
  EXPECT_TRUE(cnn->is_training());
  cnn->eval();
  for (const auto& m : cnn->modules()) EXPECT_FALSE(m->is_training()) << m->type_name();
  cnn->train();
  for (const auto& m : cnn->modules()) EXPECT_TRUE(m->is_training()) << m->type_name();
}

TEST(ModuleModes, FreezeUnfreeze) {
  nn::MLP mlp({4, 3, 2});
  EXPECT_EQ(mlp.num_parameters(true), mlp.num_parameters());
  mlp.freeze();
  for (const Tensor& p : mlp.parameters()) EXPECT_FALSE(p.requires_grad());
  EXPECT_EQ(mlp.num_parameters(true), 0);
  EXPECT_EQ(mlp.num_parameters(), 4 * 3 + 3 + 3 * 2 + 2);
  mlp.unfreeze();
  for (const Tensor& p : mlp.parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(ModuleModes, ZeroGradDropsGradients) {
  manual_seed(fresh_seed());
  nn::MLP mlp({5, 4, 3});
  Tensor y = mlp(random_tensor({2, 5}, fresh_seed(), -1, 1, DType::f32));
  y.sum().backward();
  for (const Tensor& p : mlp.parameters()) EXPECT_TRUE(p.grad().defined());
  mlp.zero_grad();
  for (const Tensor& p : mlp.parameters()) EXPECT_FALSE(p.grad().defined());
}

// ------------------------------------------------------------------------------------ printing
TEST(ModuleRepr, SmallCnnPrintsLikePyTorch) {
  const std::string expected =
      "Sequential(\n"
      "  (0): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
      "  (1): BatchNorm2d(32, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
      "  (2): ReLU()\n"
      "  (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
      "  (4): Conv2d(32, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
      "  (5): BatchNorm2d(64, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
      "  (6): ReLU()\n"
      "  (7): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
      "  (8): Flatten(start_dim=1, end_dim=-1)\n"
      "  (9): Linear(in_features=3136, out_features=128, bias=True)\n"
      "  (10): ReLU()\n"
      "  (11): Linear(in_features=128, out_features=10, bias=True)\n"
      ")";
  EXPECT_EQ(nn::small_cnn()->repr(), expected);
}

TEST(ModuleRepr, NestedIndentationAndLeafReprs) {
  struct Block : nn::Module {
    Block() {
      register_module("body", std::make_shared<nn::Sequential>(
                                  std::initializer_list<std::shared_ptr<nn::Module>>{
                                      std::make_shared<nn::Linear>(4, 4, false),
                                      std::make_shared<nn::GELU>(GeluApproximation::tanh)}));
      register_module("norm", std::make_shared<nn::LayerNorm>(4));
    }
  };
  const std::string expected =
      "Block(\n"
      "  (body): Sequential(\n"
      "    (0): Linear(in_features=4, out_features=4, bias=False)\n"
      "    (1): GELU(approximate='tanh')\n"
      "  )\n"
      "  (norm): LayerNorm((4,), eps=1e-05, elementwise_affine=True)\n"
      ")";
  EXPECT_EQ(Block().repr(), expected);
  EXPECT_EQ(
      nn::Conv2d(4, 8, {3, 5}, {.stride = 2, .dilation = 2, .groups = 2, .bias = false}).repr(),
      "Conv2d(4, 8, kernel_size=(3, 5), stride=(2, 2), dilation=(2, 2), groups=2, "
      "bias=False)");
  EXPECT_EQ(nn::Dropout(0.5).repr(), "Dropout(p=0.5, inplace=False)");
  EXPECT_EQ(nn::LeakyReLU().repr(), "LeakyReLU(negative_slope=0.01)");
  EXPECT_EQ(nn::Embedding(10, 3).repr(), "Embedding(10, 3)");
  EXPECT_EQ(nn::AvgPool2d(3, 1, 1).repr(), "AvgPool2d(kernel_size=3, stride=1, padding=1)");
  EXPECT_EQ(nn::AdaptiveAvgPool2d(1).repr(), "AdaptiveAvgPool2d(output_size=1)");
  EXPECT_EQ(nn::AdaptiveAvgPool2d({2, 3}).repr(), "AdaptiveAvgPool2d(output_size=(2, 3))");
  EXPECT_EQ(nn::BatchNorm1d(5, 1e-3, std::nullopt).repr(),
            "BatchNorm1d(5, eps=0.001, momentum=None, affine=True, track_running_stats=True)");
  EXPECT_EQ(nn::LayerNorm(Shape{2, 3}).repr(),
            "LayerNorm((2, 3), eps=1e-05, elementwise_affine=True)");
  EXPECT_EQ(nn::ModuleList().repr(), "ModuleList()");
}

TEST(ModuleRepr, PythonFloat) {
  EXPECT_EQ(nn::python_float(1e-5), "1e-05");
  EXPECT_EQ(nn::python_float(0.1), "0.1");
  EXPECT_EQ(nn::python_float(1.0), "1.0");
  EXPECT_EQ(nn::python_float(0.0), "0.0");
  EXPECT_EQ(nn::python_float(0.0001), "0.0001");
  EXPECT_EQ(nn::python_float(2.5e-7), "2.5e-07");
  EXPECT_EQ(nn::python_float(123.456), "123.456");
  EXPECT_EQ(nn::python_float(-0.75), "-0.75");
  EXPECT_EQ(nn::python_float(1e16), "1e+16");
  EXPECT_EQ(nn::python_float(1e15), "1000000000000000.0");
  EXPECT_EQ(nn::python_float(1.0 / 3.0), "0.3333333333333333");
}

// ---------------------------------------------------------------------------------- containers
TEST(Containers, SequentialIndexingAndChaining) {
  manual_seed(fresh_seed());
  auto l1 = std::make_shared<nn::Linear>(3, 4);
  auto l2 = std::make_shared<nn::Linear>(4, 2);
  nn::Sequential seq{l1, std::make_shared<nn::Tanh>(), l2};
  EXPECT_EQ(seq.size(), 3u);
  EXPECT_EQ(seq[0].get(), l1.get());
  EXPECT_EQ(seq[-1].get(), l2.get());
  EXPECT_EQ(seq.at<nn::Linear>(2).get(), l2.get());
  EXPECT_THROW(seq.at<nn::Linear>(1), ValueError);
  EXPECT_THROW(seq[3], IndexError);
  EXPECT_THROW(seq[-4], IndexError);
  const Tensor x = random_tensor({5, 3}, fresh_seed(), -1, 1, DType::f32);
  EXPECT_TRUE(testing::all_close(seq(x), (*l2)(tanh((*l1)(x))), 1e-6, 1e-7));
  nn::ModuleList list{l1, l2};
  EXPECT_EQ(list.size(), 2u);
  EXPECT_EQ(keys_of(list.state_dict()),
            (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
  size_t n = 0;
  for (const auto& m : list) n += m != nullptr;
  EXPECT_EQ(n, 2u);
}

}  // namespace
}  // namespace gradus
