// nn::Llama against transformers' LlamaForCausalLM (tools/make_llama_golden.py): multi-query,
// grouped-query and multi-head attention (the last with a tied head and attention biases), loaded
// from Hugging Face directories through io::load_hf_llama, give the same logits, loss, gradients
// and AdamW step, in float64 (tight) and float32, at positions beyond the training context. A
// save_hf_llama -> load_hf_llama round trip is bitwise, sharded or not.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "golden/golden_util.h"
#include "gradus/gradus.h"
#include "support/test_util.h"

namespace gradus {
namespace {

using testing::all_close;
namespace fs = std::filesystem;

const std::string kDir = std::string(GRADUS_TEST_DATA_DIR) + "/golden/";

// A fresh directory, removed at the end of the scope.
class Scratch {
 public:
  Scratch() {
    std::string tmpl = (fs::temp_directory_path() / "gradus_hf_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path() const { return dir_.string(); }

 private:
  fs::path dir_;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

// fn() throws E whose message contains `needle`.
template <typename E, typename F>
void expect_throw_containing(F fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one naming " << needle;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

struct Case {
  int kv_heads;
  DType dtype;
};

class HfLlama : public ::testing::TestWithParam<Case> {};

TEST_P(HfLlama, LogitsLossGradientsAndAdamWStepMatchTransformers) {
  const auto [kv_heads, dtype] = GetParam();
  const double tol = dtype == DType::f64 ? 1e-9 : 2e-4;
  const std::string name = "llama_kv" + std::to_string(kv_heads);
  const io::SafetensorsFile& g = golden::file(name + ".safetensors");
  std::shared_ptr<nn::Llama> model = io::load_hf_llama(kDir + "hf_" + name);
  model->to(dtype);
  EXPECT_EQ(model->config.n_kv_head, kv_heads);
  EXPECT_EQ(model->config.n_head, 4);
  EXPECT_EQ(model->config.block_size, 16);
  ASSERT_GT(g.at("input").size(1), model->config.block_size);  // RoPE past the context

  EXPECT_EQ(golden::expect_language_model_matches(*model, g, tol),
            std::stoi(g.metadata.at("parameters")));
}

INSTANTIATE_TEST_SUITE_P(KvHeadsAndDtypes, HfLlama,
                         ::testing::Values(Case{1, DType::f64}, Case{2, DType::f64},
                                           Case{4, DType::f64}, Case{1, DType::f32},
                                           Case{2, DType::f32}, Case{4, DType::f32}),
                         [](const auto& info) {
                           return "kv" + std::to_string(info.param.kv_heads) + "_" +
                                  dtype_name(info.param.dtype);
                         });

// Every tensor of two models, bitwise.
void expect_same_weights(const nn::Module& a, const nn::Module& b) {
  const nn::StateDict sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.items().size(), sb.items().size());
  for (const auto& [name, t] : sa.items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(sb.contains(name));
    EXPECT_EQ(testing::values_of(t), testing::values_of(sb.at(name)));
  }
}

TEST(HfLlamaRoundTrip, SaveThenLoadIsBitwiseWholeAndSharded) {
  Scratch tmp;
  for (int kv : {2, 4}) {  // untied; tied with biases
    SCOPED_TRACE(kv);
    auto model = io::load_hf_llama(kDir + "hf_llama_kv" + std::to_string(kv));
    const std::string whole = tmp.path() + "/whole" + std::to_string(kv);
    io::save_hf_llama(*model, whole);
    EXPECT_TRUE(fs::exists(whole + "/model.safetensors"));
    expect_same_weights(*model, *io::load_hf_llama(whole));
    EXPECT_EQ(io::read_hf_llama_config(whole + "/config.json").tie_embeddings, kv == 4);

    // Shards of at most 16 KiB: several files and an index, read back the same.
    io::HfSaveOptions sharded;
    sharded.max_shard_bytes = 16 << 10;
    io::save_hf_llama(*model, whole, sharded);
    EXPECT_FALSE(fs::exists(whole + "/model.safetensors"));  // the stale single file is gone
    ASSERT_TRUE(fs::exists(whole + "/model.safetensors.index.json"));
    int shards = 0;
    for (const auto& e : fs::directory_iterator(whole)) {
      shards += e.path().filename().string().starts_with("model-");
    }
    EXPECT_GT(shards, 2);
    expect_same_weights(*model, *io::load_hf_llama(whole));
    // A model of any family by config.json's model_type.
    auto any = io::load_hf_causal_lm(whole);
    ASSERT_NE(std::dynamic_pointer_cast<nn::Llama>(any), nullptr);
  }
}

TEST(HfGpt2RoundTrip, SaveThenLoadIsBitwise) {
  Scratch tmp;
  auto model = io::load_hf_gpt2(kDir + "hf_gpt2");
  io::save_hf_gpt2(*model, tmp.path() + "/gpt2");
  expect_same_weights(*model, *io::load_hf_gpt2(tmp.path() + "/gpt2"));
  ASSERT_NE(std::dynamic_pointer_cast<nn::GPT>(io::load_hf_causal_lm(tmp.path() + "/gpt2")),
            nullptr);
}

TEST(HfLlamaLoading, RefusesWhatDoesNotFitByName) {
  Scratch tmp;
  // A config whose shapes differ from the weights.
  nn::LlamaConfig c = io::read_hf_llama_config(kDir + "hf_llama_kv2/config.json");
  c.n_kv_head = 4;
  nn::Llama wrong(c);
  EXPECT_THROW(io::load_hf_llama_weights(wrong, kDir + "hf_llama_kv2"), ShapeError);
  // Unsupported RoPE scaling and activations are named.
  auto config_with = [&](const std::string& extra) {
    const std::string dir = tmp.path() + "/cfg";
    fs::create_directories(dir);
    write_text(dir + "/config.json",
               "{\"model_type\": \"llama\", \"hidden_size\": 32, \"num_attention_heads\": "
               "4, \"intermediate_size\": 64, \"num_hidden_layers\": 1, \"vocab_size\": 10" +
                   extra + "}");
    return dir + "/config.json";
  };
  EXPECT_NO_THROW(io::read_hf_llama_config(config_with("")));
  expect_throw_containing<ValueError>(
      [&] {
        io::read_hf_llama_config(config_with(", \"rope_scaling\": {\"rope_type\": \"llama3\"}"));
      },
      "llama3");
  expect_throw_containing<ValueError>(
      [&] { io::read_hf_llama_config(config_with(", \"hidden_act\": \"gelu\"")); }, "hidden_act");
  expect_throw_containing<ValueError>(
      [&] { io::read_hf_llama_config(config_with(", \"num_key_value_heads\": 3")); }, "n_kv_head");
  expect_throw_containing<ValueError>(
      [&] { io::read_hf_llama_config(config_with(", \"hidden_size\": \"big\"")); }, "hidden_size");
  // A directory without weights, and an index naming a tensor no shard holds.
  EXPECT_THROW(io::read_hf_weights(tmp.path() + "/cfg"), IOError);
  write_text(tmp.path() + "/cfg/model.safetensors.index.json",
             "{\"weight_map\": {\"lm_head.weight\": \"model-1.safetensors\"}}");
  io::save_safetensors(tmp.path() + "/cfg/model-1.safetensors", {});
  expect_throw_containing<IOError>([&] { io::read_hf_weights(tmp.path() + "/cfg"); },
                                   "lm_head.weight");
}

}  // namespace
}  // namespace gradus
