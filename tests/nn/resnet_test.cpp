// nn::ResNet: parameter counts (computed in PyTorch), state_dict names and shapes equal to
// torchvision's resnet18 (the list tools/make_resnet_golden.py wrote to
// tests/data/golden/resnet18_state_dict.txt), shapes through the stages for 28x28 and 32x32
// inputs, initialisation, shortcuts and make_model. Numerics against PyTorch are in
// tests/golden/resnet_golden_test.cpp.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "support/test_util.h"

namespace gradus {
namespace {

using testing::all_close;
using testing::random_tensor;

const std::string kStateDictList =
    std::string(GRADUS_TEST_DATA_DIR) + "/golden/resnet18_state_dict.txt";

// The "name d0,d1,..." lines of the list, in order.
std::vector<std::pair<std::string, Shape>> torchvision_resnet18_entries() {
  std::ifstream in(kStateDictList);
  EXPECT_TRUE(in.good()) << kStateDictList;
  std::vector<std::pair<std::string, Shape>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, dims;
    fields >> name >> dims;
    Shape shape;
    std::istringstream ds(dims);
    for (std::string d; std::getline(ds, d, ',');) shape.push_back(std::stoll(d));
    out.emplace_back(name, shape);
  }
  return out;
}

// The "#count <model> = <n>" lines: parameter counts PyTorch computed for the same networks.
std::map<std::string, int64_t> pytorch_counts() {
  std::ifstream in(kStateDictList);
  std::map<std::string, int64_t> out;
  const std::string tag = "#count ";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(tag, 0) != 0) continue;
    const size_t eq = line.rfind(" = ");
    out[line.substr(tag.size(), eq - tag.size())] = std::stoll(line.substr(eq + 3));
  }
  return out;
}

// ------------------------------------------------------------------------------------ counts
TEST(ResNet, ParameterCountsEqualPyTorchs) {
  // torchvision.models.resnet18(): 11,689,512 (its model card's 11.7M).
  EXPECT_EQ(nn::resnet18(3, 1000)->num_parameters(), 11689512);
  // The 3x3 stem: 64*3*(9-49) fewer.
  EXPECT_EQ(nn::resnet18(3, 1000, true)->num_parameters(), 11681832);
  EXPECT_EQ(nn::resnet20(3, 10)->num_parameters(), 272474);
  EXPECT_EQ(nn::resnet20(1, 10)->num_parameters(), 272186);

  // The same numbers as the list the generator wrote from PyTorch's models.
  const std::map<std::string, int64_t> counts = pytorch_counts();
  ASSERT_EQ(counts.size(), 6u);
  EXPECT_EQ(counts.at("resnet18(3, 1000)"), nn::resnet18(3, 1000)->num_parameters());
  EXPECT_EQ(counts.at("resnet18(3, 1000, small_input)"),
            nn::resnet18(3, 1000, true)->num_parameters());
  EXPECT_EQ(counts.at("resnet18(1, 10, small_input)"), nn::resnet18(1, 10, true)->num_parameters());
  EXPECT_EQ(counts.at("resnet20(3, 10)"), nn::resnet20(3, 10)->num_parameters());
  EXPECT_EQ(counts.at("resnet20(1, 10)"), nn::resnet20(1, 10)->num_parameters());
  EXPECT_EQ(counts.at("resnet20(1, 10, width=8)"), nn::resnet20(1, 10, 8)->num_parameters());
}

TEST(ResNet, Resnet20IsThePapersNetworkWithProjectionShortcuts) {
  // The paper's 0.27M (option A: parameter-free shortcuts) is 269,722; option B adds two
  // projections, 1x1 conv + BatchNorm: 16->32 (512 + 64) and 32->64 (2048 + 128).
  auto net = nn::resnet20(3, 10);
  int64_t projections = 0;
  for (const auto& [name, p] : net->named_parameters()) {
    if (name.find(".downsample.") != std::string::npos) projections += p.numel();
  }
  EXPECT_EQ(projections, 576 + 2176);
  EXPECT_EQ(net->num_parameters() - projections, 269722);
  EXPECT_NEAR(static_cast<double>(net->num_parameters()), 0.27e6, 0.005e6);
  // 1 + 3 stages x 3 blocks x 2 + fc = 20 weighted layers on the main path.
  int64_t convs = 0;
  for (const auto& [name, m] : net->named_modules()) {
    if (m->type_name() == "Conv2d" && name.find("downsample") == std::string::npos) ++convs;
  }
  EXPECT_EQ(convs + 1, 20);
}

// ---------------------------------------------------------------------------------- names
TEST(ResNet, Resnet18StateDictIsTorchvisions) {
  const auto expected = torchvision_resnet18_entries();
  ASSERT_EQ(expected.size(), 122u);  // 62 parameters, 60 BatchNorm buffers
  const nn::StateDict sd = nn::resnet18(3, 1000)->state_dict();
  ASSERT_EQ(sd.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(sd.items()[i].first, expected[i].first) << "entry " << i;
    EXPECT_EQ(sd.items()[i].second.sizes(), expected[i].second) << expected[i].first;
  }
  // So a torchvision checkpoint loads strictly (here: the same names with other values).
  nn::StateDict other;
  for (const auto& [name, shape] : expected) {
    other.insert(name, name.ends_with("num_batches_tracked") ? full({}, 7, {.dtype = DType::i64})
                                                             : full(shape, 0.25));
  }
  auto net = nn::resnet18(3, 1000);
  EXPECT_TRUE(net->load_state_dict(other).ok());
  EXPECT_EQ(net->fc->bias.to_vector<double>()[0], 0.25);
}

TEST(ResNet, Resnet20UsesTheSameNamingScheme) {
  const nn::StateDict sd = nn::resnet20(1, 10)->state_dict();
  EXPECT_EQ(sd.at("conv1.weight").sizes(), (Shape{16, 1, 3, 3}));
  EXPECT_EQ(sd.at("layer1.2.conv2.weight").sizes(), (Shape{16, 16, 3, 3}));
  EXPECT_EQ(sd.at("layer2.0.conv1.weight").sizes(), (Shape{32, 16, 3, 3}));
  EXPECT_EQ(sd.at("layer2.0.downsample.0.weight").sizes(), (Shape{32, 16, 1, 1}));
  EXPECT_EQ(sd.at("layer3.0.downsample.1.running_var").sizes(), (Shape{64}));
  EXPECT_EQ(sd.at("fc.weight").sizes(), (Shape{10, 64}));
  // Shape-keeping blocks have identity shortcuts: no parameters.
  EXPECT_FALSE(sd.contains("layer1.0.downsample.0.weight"));
  EXPECT_FALSE(sd.contains("layer2.1.downsample.0.weight"));
  EXPECT_FALSE(sd.contains("layer4.0.conv1.weight"));
  for (const auto& [name, t] : sd) EXPECT_FALSE(name.ends_with("conv1.bias")) << name;
}

// ---------------------------------------------------------------------------------- shapes
// The output of each stage (via forward hooks) and of the network.
std::vector<Shape> stage_shapes(nn::ResNet& net, const Tensor& x, Shape* logits) {
  std::vector<Shape> shapes;
  std::vector<nn::HookHandle> handles;
  for (const auto& stage : net.layers) {
    handles.push_back(stage->register_forward_hook(
        [&](nn::Module&, const std::vector<Tensor>&, const Tensor& out) -> std::optional<Tensor> {
          shapes.push_back(out.sizes());
          return std::nullopt;
        }));
  }
  *logits = net(x).sizes();
  for (auto& h : handles) h.remove();
  return shapes;
}

TEST(ResNet, Resnet20ShapesFor28And32) {
  Shape logits;
  auto mnist = nn::resnet20(1, 10);
  EXPECT_EQ(stage_shapes(*mnist, random_tensor({2, 1, 28, 28}, 1, -1, 1, DType::f32), &logits),
            (std::vector<Shape>{{2, 16, 28, 28}, {2, 32, 14, 14}, {2, 64, 7, 7}}));
  EXPECT_EQ(logits, (Shape{2, 10}));
  auto cifar = nn::resnet20(3, 100);
  EXPECT_EQ(stage_shapes(*cifar, random_tensor({2, 3, 32, 32}, 2, -1, 1, DType::f32), &logits),
            (std::vector<Shape>{{2, 16, 32, 32}, {2, 32, 16, 16}, {2, 64, 8, 8}}));
  EXPECT_EQ(logits, (Shape{2, 100}));
}

TEST(ResNet, Resnet18ShapesFor28And32AndTheImagenetStem) {
  Shape logits;
  auto small = nn::resnet18(3, 10, true);
  EXPECT_EQ(
      stage_shapes(*small, random_tensor({2, 3, 32, 32}, 3, -1, 1, DType::f32), &logits),
      (std::vector<Shape>{{2, 64, 32, 32}, {2, 128, 16, 16}, {2, 256, 8, 8}, {2, 512, 4, 4}}));
  EXPECT_EQ(logits, (Shape{2, 10}));
  small->eval();  // eval mode takes a batch of one (no batch statistics needed)
  EXPECT_EQ(
      stage_shapes(*small, random_tensor({1, 3, 28, 28}, 4, -1, 1, DType::f32), &logits),
      (std::vector<Shape>{{1, 64, 28, 28}, {1, 128, 14, 14}, {1, 256, 7, 7}, {1, 512, 4, 4}}));
  EXPECT_EQ(logits, (Shape{1, 10}));
  // ImageNet stem: /2 (conv) /2 (max pool), then /2 per later stage: 64 -> 16, 8, 4, 2.
  auto imagenet = nn::resnet18(1, 1000);
  EXPECT_EQ(stage_shapes(*imagenet, random_tensor({2, 1, 64, 64}, 5, -1, 1, DType::f32), &logits),
            (std::vector<Shape>{{2, 64, 16, 16}, {2, 128, 8, 8}, {2, 256, 4, 4}, {2, 512, 2, 2}}));
  EXPECT_EQ(logits, (Shape{2, 1000}));
}

// ------------------------------------------------------------------------------ behaviour
TEST(ResNet, InitialisationIsTorchvisions) {
  manual_seed(testing::fresh_seed());
  auto net = nn::resnet18(3, 1000);
  // kaiming_normal_(fan_out, relu): std sqrt(2 / (out * k * k)); 2.4M draws, so within 1%.
  const Tensor w = net->layers[3]->at<nn::BasicBlock>(1)->conv2->weight;
  const std::vector<double> v = w.to_vector<double>();
  double sum = 0, sq = 0;
  for (double x : v) sum += x, sq += x * x;
  const double n = static_cast<double>(v.size()), mean = sum / n;
  const double expected_std = std::sqrt(2.0 / (512 * 9));
  EXPECT_NEAR(mean, 0.0, 0.01 * expected_std);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), expected_std, 0.01 * expected_std);
  // The projection's 1x1 conv too (fan_out = 128).
  const Tensor proj = net->layers[1]->at<nn::BasicBlock>(0)->downsample->at<nn::Conv2d>(0)->weight;
  const std::vector<double> pv = proj.to_vector<double>();
  double psq = 0;
  for (double x : pv) psq += x * x;
  EXPECT_NEAR(std::sqrt(psq / static_cast<double>(pv.size())), std::sqrt(2.0 / 128), 0.05 * 0.125);
  // BatchNorms (bn1, bn2, downsample.1): weight and running_var 1, bias and the rest 0.
  for (const auto& [name, t] : net->state_dict()) {
    if (name.find("bn") == std::string::npos && name.find("downsample.1.") == std::string::npos) {
      continue;
    }
    const bool one = name.ends_with(".weight") || name.ends_with(".running_var");
    EXPECT_TRUE(all_close(t, full(t.sizes(), one ? 1.0 : 0.0), 0, 0)) << name;
  }
  // fc keeps Linear's default U(-1/sqrt(512), 1/sqrt(512)).
  double fc_max = 0;
  for (double x : net->fc->weight.to_vector<double>()) fc_max = std::max(fc_max, std::abs(x));
  EXPECT_LE(fc_max, 1.0 / std::sqrt(512.0));
  EXPECT_GE(fc_max, 0.99 / std::sqrt(512.0));
}

TEST(ResNet, ShortcutsAreIdentityOrProjection) {
  nn::BasicBlock same(8, 8, 1), wider(8, 16, 1), strided(8, 8, 2);
  EXPECT_EQ(same.downsample, nullptr);
  ASSERT_NE(wider.downsample, nullptr);
  ASSERT_NE(strided.downsample, nullptr);
  EXPECT_EQ(strided.downsample->at<nn::Conv2d>(0)->options.stride.h, 2);
  EXPECT_EQ(strided.conv1->options.stride.h, 2);
  EXPECT_EQ(strided.conv2->options.stride.h, 1);

  // With the residual branch silenced (conv2 = 0, so bn2's output is its bias, 0), a block
  // computes relu(shortcut(x)): x itself for the identity shortcut.
  const Tensor x = random_tensor({2, 8, 5, 5}, 6, -1, 1, DType::f32);
  {
    NoGradGuard g;
    same.conv2->weight.fill_(0.0);
  }
  EXPECT_TRUE(all_close(same(x), relu(x), 0, 0));
}

TEST(ResNet, BackwardReachesEveryParameter) {
  auto net = nn::resnet20(1, 10, 4);
  const Tensor x = random_tensor({3, 1, 28, 28}, 7, -1, 1, DType::f32);
  cross_entropy(net->forward(x), tensor({1, 5, 9}, {3}, {.dtype = DType::i64})).backward();
  for (const auto& [name, p] : net->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    double norm = 0;
    for (double g : p.grad().to_vector<double>()) norm += g * g;
    EXPECT_GT(norm, 0.0) << name;
  }
}

TEST(ResNet, RejectsBadConfigsAndInputs) {
  EXPECT_THROW(nn::ResNet(nn::ResNetConfig{.blocks = {2, 2}, .widths = {64}}), ValueError);
  EXPECT_THROW(nn::ResNet(nn::ResNetConfig{.blocks = {}, .widths = {}}), ValueError);
  EXPECT_THROW(nn::ResNet(nn::ResNetConfig{.blocks = {2, 0}, .widths = {8, 16}}), ValueError);
  auto net = nn::resnet20(1, 10, 4);
  EXPECT_THROW(net->forward(random_tensor({1, 28, 28}, 8, -1, 1, DType::f32)), ShapeError);
}

TEST(ResNet, MakeModelBuildsBoth) {
  const std::vector<std::string> names = nn::model_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "resnet20"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "resnet18"), names.end());
  // MNIST: 1 channel, 28x28, 10 classes.
  auto r20 = nn::make_model("resnet20");
  EXPECT_EQ(r20->num_parameters(), 272186);
  EXPECT_EQ(r20->state_dict().at("fc.weight").sizes(), (Shape{10, 64}));
  // CIFAR-sized images get the small stem; ImageNet-sized ones torchvision's.
  auto cifar = nn::make_model("resnet18", {.in_channels = 3, .image_size = 32, .num_classes = 10});
  EXPECT_EQ(cifar->state_dict().at("conv1.weight").sizes(), (Shape{64, 3, 3, 3}));
  EXPECT_EQ(cifar->child("maxpool")->type_name(), "Identity");
  auto imagenet =
      nn::make_model("resnet18", {.in_channels = 3, .image_size = 224, .num_classes = 1000});
  EXPECT_EQ(imagenet->state_dict().at("conv1.weight").sizes(), (Shape{64, 3, 7, 7}));
  EXPECT_EQ(imagenet->num_parameters(), 11689512);
  EXPECT_EQ(imagenet->child("maxpool")->type_name(), "MaxPool2d");
}

}  // namespace
}  // namespace gradus
