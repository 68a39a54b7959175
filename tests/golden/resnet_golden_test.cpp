// nn::ResNet against PyTorch: tests/data/golden/resnet.safetensors, written by
// tools/make_resnet_golden.py (a copy of torchvision's ResNet, same names). The network is
// resnet20(1, 10, width=8) on a batch of 4 1x28x28 images with randomised BatchNorm parameters
// and running statistics: one training-mode forward (logits, cross-entropy loss), backward (every
// parameter gradient), the running statistics it left, then an eval-mode forward. PyTorch computed
// all of it in float64 from the float32 weights; gradus runs it in float64 (only summation order
// differs) and in float32.
#include <cmath>

#include "golden/golden_util.h"
#include "gradus/io/safetensors.h"
#include "gradus/nn/nn.h"
#include "support/test_util.h"

namespace gradus {
namespace {

// Relative to each element, with a floor relative to the tensor's largest element (BatchNorm's
// input gradient sums to zero over the batch: its error scales with the terms).
::testing::AssertionResult close(const Tensor& actual, const Tensor& expected, double rtol,
                                 const std::string& what) {
  return golden::close(actual, expected, {.rtol = rtol, .atol = 0, .relative_floor = true}, what);
}

// The parameter is the dtype's name ("f64", "f32"), which also names the test.
class GoldenResNet : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenResNet, TrainStepAndEvalMatchPyTorch) {
  const io::SafetensorsFile& file = golden::file("resnet.safetensors");
  const DType dt = GetParam() == "f64" ? DType::f64 : DType::f32;
  // float64: summation order alone (it passes at 1e-13 here). float32: 20 layers of rounding;
  // the worst element is ~3e-6 here. That holds because the generator picked data whose ReLU
  // inputs all lie well outside float32 noise: one that rounds across the kink changes every
  // gradient below it by percents (see tools/make_resnet_golden.py).
  const double rtol = dt == DType::f64 ? 1e-10 : 2e-5;

  auto net = nn::resnet20(1, 10, 8);
  nn::StateDict weights;
  const std::string prefix = "weights.";
  for (const auto& [name, t] : file.tensors) {
    if (name.starts_with(prefix)) weights.insert(name.substr(prefix.size()), t);
  }
  net->load_state_dict(weights);  // strict: the names are PyTorch's
  net->to(dt);
  net->train();

  const Tensor x = file.at("input").to(dt);
  const Tensor logits = (*net)(x);
  EXPECT_EQ(logits.dtype(), dt);
  EXPECT_TRUE(close(logits, file.at("logits"), rtol, "training-mode logits"));
  Tensor loss = cross_entropy(logits, file.at("target"));
  EXPECT_TRUE(close(loss, file.at("loss"), rtol, "loss"));
  loss.backward();
  for (const auto& [name, p] : net->named_parameters()) {
    EXPECT_TRUE(close(p.grad(), file.at("grad." + name), rtol, "gradient of " + name));
  }
  for (const auto& [name, b] : net->named_buffers()) {
    const Tensor& expected = file.at("buffers." + name);
    if (is_floating(expected.dtype())) {
      EXPECT_TRUE(close(b, expected, rtol, name));
    } else {
      EXPECT_EQ(b.to_vector<int64_t>(), expected.to_vector<int64_t>()) << name;
    }
  }

  net->eval();
  NoGradGuard no_grad;
  EXPECT_TRUE(close((*net)(x), file.at("eval_logits"), rtol, "eval-mode logits"));
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenResNet, ::testing::Values("f64", "f32"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(GoldenResNetFile, ComesFromTheGeneratorScript) {
  const io::SafetensorsFile& file = golden::file("resnet.safetensors");
  ASSERT_TRUE(file.metadata.count("source"));
  EXPECT_EQ(file.metadata.at("source"), "tools/make_resnet_golden.py");
  EXPECT_EQ(file.metadata.at("model"), "resnet20(in_channels=1, num_classes=10, width=8)");
  // Every parameter and buffer of the network, nothing else.
  const nn::StateDict sd = nn::resnet20(1, 10, 8)->state_dict();
  int64_t weights = 0;
  for (const auto& [name, t] : file.tensors) weights += name.starts_with("weights.") ? 1 : 0;
  EXPECT_EQ(weights, static_cast<int64_t>(sd.size()));
}

}  // namespace
}  // namespace gradus
