// save_module / load_module: PyTorch-identical names (a file written by torch loads strictly and
// computes the same function), round trips, and strict-mode errors that list every mismatch.
#include <cmath>
#include <cstdlib>

#include "gradus/io/io.h"
#include "io/io_test_util.h"

namespace gradus::testing {
namespace {

std::shared_ptr<nn::Sequential> make_seq() {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Linear>(3, 2));
  seq->push_back(std::make_shared<nn::BatchNorm1d>(2));
  seq->push_back(std::make_shared<nn::Linear>(2, 1));
  return seq;
}

std::vector<std::vector<uint8_t>> snapshot(const nn::Module& m) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& [k, t] : m.state_dict()) out.push_back(tensor_bytes(t.contiguous()));
  return out;
}

using ModuleIO = IoTest;

// tests/data/safetensors/torch_sequential.safetensors is the state_dict of
// torch.nn.Sequential(Linear(3, 2), BatchNorm1d(2), Linear(2, 1))
// (tools/make_safetensors_golden.py).
TEST_F(ModuleIO, TorchWrittenStateDictLoadsStrictlyAndComputesTheSameFunction) {
  auto seq = make_seq();
  io::load_module(*seq,
                  std::string(GRADUS_TEST_DATA_DIR) + "/safetensors/torch_sequential.safetensors");
  seq->eval();
  Tensor x = from_vector<float>({1, 2, 3, -1, 0.5f, 2}, {2, 3});
  Tensor y = seq->forward(x);
  ASSERT_EQ(y.sizes(), (Shape{2, 1}));

  // The same network by hand in float64 from the formulas of the generator script.
  const double xs[2][3] = {{1, 2, 3}, {-1, 0.5, 2}};
  const double b1[2] = {0.5, -0.5}, g[2] = {1.5, 0.75}, beta[2] = {0.1, -0.2};
  const double rm[2] = {0.2, -0.1}, rv[2] = {2.0, 0.5}, w2[2] = {0.3, -0.6}, b2 = 0.05;
  std::vector<double> want;
  for (int n = 0; n < 2; ++n) {
    double out = b2;
    for (int i = 0; i < 2; ++i) {
      double h = b1[i];
      for (int j = 0; j < 3; ++j) h += (0.1 * (i * 3 + j) - 0.25) * xs[n][j];
      const double bn = (h - rm[i]) / std::sqrt(rv[i] + 1e-5) * g[i] + beta[i];
      out += w2[i] * bn;
    }
    want.push_back(out);
  }
  EXPECT_TRUE(all_close(y, tensor(want, {2, 1}), 1e-5, 1e-6));
  auto bn = seq->at<nn::BatchNorm1d>(1);
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 7);
}

TEST_F(ModuleIO, SaveLoadRoundTripUsesPyTorchNamesInOrder) {
  manual_seed(fresh_seed());
  auto a = make_seq();
  auto b = make_seq();
  {
    NoGradGuard ng;
    a->at<nn::BatchNorm1d>(1)->running_mean.copy_(random_tensor({2}, fresh_seed()));
    a->at<nn::BatchNorm1d>(1)->num_batches_tracked.fill_(5);
  }
  ASSERT_NE(snapshot(*a), snapshot(*b));
  const std::string p = path("seq.safetensors");
  io::save_module(*a, p, {{"arch", "seq"}});

  io::SafetensorsFile f = io::read_safetensors(p);
  std::vector<std::string> names;
  for (const auto& [k, t] : f.tensors) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias",
                                             "1.running_mean", "1.running_var",
                                             "1.num_batches_tracked", "2.weight", "2.bias"}));
  EXPECT_EQ(f.at("1.num_batches_tracked").dtype(), DType::i64);
  EXPECT_EQ(f.metadata.at("arch"), "seq");

  if (const char* out = std::getenv("GRADUS_IO_EXPORT_DIR")) {  // for tools/check_safetensors.py
    io::save_module(*a, std::string(out) + "/gradus_sequential.safetensors");
  }
  nn::LoadResult r = io::load_module(*b, p);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(snapshot(*a), snapshot(*b));
  // Parameters were updated in place: the handles an optimizer holds still see the new values.
  EXPECT_TRUE(b->parameters()[0].same(b->at<nn::Linear>(0)->weight));
}

TEST_F(ModuleIO, StrictMismatchListsEveryProblemAndLoadsNothing) {
  auto m = make_seq();
  const auto before = snapshot(*m);
  nn::StateDict sd = m->state_dict();
  std::vector<std::pair<std::string, Tensor>> items;
  for (const auto& [k, t] : sd) {
    if (k == "2.bias") continue;  // missing
    if (k == "0.weight") {
      items.emplace_back(k, random_tensor({3, 3}, fresh_seed(), -1, 1, DType::f32));  // shape
      continue;
    }
    items.emplace_back(k, random_tensor(t.sizes(), fresh_seed(), -1, 1, t.dtype()));
  }
  items.emplace_back("head.weight", random_tensor({1}, fresh_seed(), -1, 1, DType::f32));
  const std::string p = path("bad.safetensors");
  io::save_safetensors(p, items);
  try {
    io::load_module(*m, p);
    ADD_FAILURE() << "strict load accepted a mismatching file";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find("2.bias"), std::string::npos) << msg;
    EXPECT_NE(msg.find("head.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("0.weight"), std::string::npos) << msg;
  }
  EXPECT_EQ(snapshot(*m), before);

  // Non-strict: loads what matches and reports the rest.
  nn::LoadResult r = io::load_module(*m, p, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, std::vector<std::string>{"2.bias"});
  EXPECT_EQ(r.unexpected_keys, std::vector<std::string>{"head.weight"});
  ASSERT_EQ(r.mismatched_keys.size(), 1u);
  EXPECT_NE(r.mismatched_keys[0].find("0.weight"), std::string::npos);
  // A matching entry was loaded; the mismatched one was not.
  for (const auto& [k, t] : items) {
    if (k == "2.weight") {
      EXPECT_EQ(tensor_bytes(m->at<nn::Linear>(2)->weight), tensor_bytes(t));
    }
  }
  EXPECT_EQ(tensor_bytes(m->at<nn::Linear>(0)->weight), before[0]);
}

TEST_F(ModuleIO, CudaModuleSavesAndLoadsIntoACpuModule) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  manual_seed(fresh_seed());
  auto a = make_seq();
  const auto host_values = snapshot(*a);
  a->to(Device::cuda(0));
  const std::string p = path("cuda.safetensors");
  io::save_module(*a, p);
  auto b = make_seq();
  io::load_module(*b, p);
  EXPECT_EQ(snapshot(*b), host_values);
}

}  // namespace
}  // namespace gradus::testing
