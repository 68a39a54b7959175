// nn::GPT against transformers' GPT2LMHeadModel (tools/make_gpt2_golden.py): a Hugging Face
// checkpoint loads through io::load_hf_gpt2 and gives the same logits, loss, gradients and
// AdamW step, in float64 (tight) and float32.
#include <gtest/gtest.h>

#include <string>

#include "golden/golden_util.h"
#include "gradus/gradus.h"
#include "support/test_util.h"

namespace gradus {
namespace {

using testing::all_close;

const std::string kDir = std::string(GRADUS_TEST_DATA_DIR) + "/golden/";

class HfGpt2 : public ::testing::TestWithParam<DType> {};

TEST_P(HfGpt2, LogitsLossGradientsAndAdamWStepMatchTransformers) {
  const DType dtype = GetParam();
  const double tol = dtype == DType::f64 ? 1e-9 : 2e-4;
  const io::SafetensorsFile& g = golden::file("gpt2.safetensors");
  std::shared_ptr<nn::GPT> model = io::load_hf_gpt2(kDir + "hf_gpt2");
  model->to(dtype);
  EXPECT_EQ(model->config.n_layer, 2);
  EXPECT_EQ(model->config.vocab_size, 97);

  // Every tensor of the checkpoint: 28 (the tied head is wte).
  EXPECT_EQ(golden::expect_language_model_matches(*model, g, tol), 28);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HfGpt2, ::testing::Values(DType::f64, DType::f32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(HfGpt2Loading, RejectsWhatDoesNotFit) {
  // A config whose shapes differ from the file: one error naming the mismatched tensors.
  nn::GPTConfig c = io::read_hf_gpt2_config(kDir + "hf_gpt2/config.json");
  c.n_embd = 64;
  nn::GPT wrong(c);
  EXPECT_THROW(io::load_hf_gpt2_weights(wrong, kDir + "hf_gpt2/model.safetensors"), ShapeError);
  EXPECT_THROW(io::read_hf_gpt2_config(kDir + "no_such_config.json"), IOError);
}

}  // namespace
}  // namespace gradus
