// Freezing by name prefix: frozen parameters get no gradient and stay bitwise unchanged through
// training; batch norms under a frozen prefix can stay in eval mode (running statistics kept);
// a prefix that matches nothing is an error naming what exists.
#include <gtest/gtest.h>

#include "gradus/gradus.h"
#include "support/test_util.h"

namespace gradus {
namespace {

using testing::fresh_seed;
using testing::random_tensor;

std::shared_ptr<nn::Sequential> small_cnn() {
  auto features =
      std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
          std::make_shared<nn::Conv2d>(1, 4, nn::Size2{3, 3}), std::make_shared<nn::BatchNorm2d>(4),
          std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>()});
  auto net = std::make_shared<nn::Sequential>();
  net->push_back("features", features);
  net->push_back("classifier", std::make_shared<nn::Linear>(4 * 6 * 6, 3));
  return net;
}

std::vector<std::vector<double>> values(const std::vector<Tensor>& ts) {
  std::vector<std::vector<double>> out;
  for (const Tensor& t : ts) out.push_back(t.to_vector<double>());
  return out;
}

TEST(Freeze, UnfrozenModelRunsEveryWeightGradientKernel) {
  manual_seed(fresh_seed());
  auto net = small_cnn();
  const Tensor x = random_tensor({5, 1, 8, 8}, fresh_seed(), -1, 1, DType::f32);
  const Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 0, 1}, {5}, {.dtype = DType::i64});
  KernelCountScope kernels;
  cross_entropy((*net)(x), y).backward();
  EXPECT_EQ(kernels["conv2d.weight_grad"], 1);
  EXPECT_EQ(kernels["conv2d.input_grad"], 0);  // the image needs no gradient
  EXPECT_EQ(kernels["linear.weight_grad"], 1);
  EXPECT_EQ(kernels["linear.input_grad"], 1);
}

TEST(Freeze, FrozenPrefixGetsNoGradientAndStaysUnchanged) {
  manual_seed(fresh_seed());
  auto net = small_cnn();
  EXPECT_EQ(net->freeze("features.", /*keep_norm_eval=*/true), 4);  // conv w, b; bn w, b
  std::vector<Tensor> frozen, trained;
  for (auto& [name, p] : net->named_parameters()) {
    (name.starts_with("features.") ? frozen : trained).push_back(p);
    EXPECT_EQ(p.requires_grad(), name.rfind("features.", 0) != 0) << name;
  }
  const auto frozen_before = values(frozen), trained_before = values(trained);
  auto bn = net->at<nn::Sequential>(0)->at<nn::BatchNorm2d>(1);
  const auto stats_before = values({bn->running_mean, bn->running_var});
  optim::Adam opt(net->parameters(), {.lr = 1e-2});
  net->train();
  EXPECT_FALSE(bn->is_training());  // kept in eval by the freeze
  EXPECT_TRUE(net->is_training());
  for (int step = 0; step < 3; ++step) {
    const Tensor x = random_tensor({5, 1, 8, 8}, fresh_seed(), -1, 1, DType::f32);
    const Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 0, 1}, {5}, {.dtype = DType::i64});
    opt.zero_grad();
    {
      // The frozen convolution's backward kernels do not run at all; the head's weight
      // gradient runs once, and no input gradient is wanted from it either.
      KernelCountScope kernels;
      cross_entropy((*net)(x), y).backward();
      EXPECT_EQ(kernels["conv2d.weight_grad"], 0);
      EXPECT_EQ(kernels["conv2d.input_grad"], 0);
      EXPECT_EQ(kernels["linear.weight_grad"], 1);
      EXPECT_EQ(kernels["linear.input_grad"], 0);
    }
    for (const Tensor& p : frozen) EXPECT_FALSE(p.grad().defined());
    for (const Tensor& p : trained) EXPECT_TRUE(p.grad().defined());
    opt.step();
  }
  EXPECT_EQ(values(frozen), frozen_before);
  EXPECT_NE(values(trained), trained_before);
  EXPECT_EQ(values({bn->running_mean, bn->running_var}), stats_before);

  net->unfreeze("features.");
  net->train();
  EXPECT_TRUE(bn->is_training());
  for (const Tensor& p : frozen) EXPECT_TRUE(p.requires_grad());
}

TEST(Freeze, UnknownPrefixNamesWhatExists) {
  auto net = small_cnn();
  try {
    net->freeze("backbone.");
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'backbone.'"), std::string::npos) << m;
    EXPECT_NE(m.find("features."), std::string::npos) << m;
    EXPECT_NE(m.find("classifier."), std::string::npos) << m;
  }
  net->requires_grad_(false);
  for (const Tensor& p : net->parameters()) EXPECT_FALSE(p.requires_grad());
  net->requires_grad_(true);
  for (const Tensor& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
}

}  // namespace
}  // namespace gradus
