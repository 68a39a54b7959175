// Hugging Face GPT-2 loading (gradus/io/hf_gpt2.h).
#include "gradus/io/hf_gpt2.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gradus/autograd.h"
#include "gradus/io/hf.h"
#include "gradus/io/safetensors.h"

namespace gradus::io {
namespace {

// Conv1D weights stored [in, out] by transformers.
bool is_conv1d_weight(const std::string& name) {
  return name.ends_with("attn.c_attn.weight") || name.ends_with("attn.c_proj.weight") ||
         name.ends_with("mlp.c_fc.weight") || name.ends_with("mlp.c_proj.weight");
}

// The mask buffers older transformers versions saved (not weights).
bool is_mask_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

}  // namespace

nn::GPTConfig read_hf_gpt2_config(const std::string& path) {
  std::ifstream in(path);
  GRADUS_CHECK(in.good(), IOError, "read_hf_gpt2_config: cannot open ", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw IOError(std::string("read_hf_gpt2_config: ") + path + " is not valid JSON: " + e.what());
  }
  nn::GPTConfig c;
  auto get = [&](const char* key, int64_t fallback) {
    if (!j.contains(key)) return fallback;
    GRADUS_CHECK(j[key].is_number_integer(), ValueError, "read_hf_gpt2_config: ", path, ": \"", key,
                 "\" must be an integer");
    return j[key].get<int64_t>();
  };
  c.vocab_size = get("vocab_size", 50257);
  c.block_size = get("n_positions", 1024);
  c.n_layer = get("n_layer", 12);
  c.n_head = get("n_head", 12);
  c.n_embd = get("n_embd", 768);
  if (j.contains("layer_norm_epsilon")) c.layer_norm_eps = j["layer_norm_epsilon"].get<double>();
  const std::string act = j.value("activation_function", std::string("gelu_new"));
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    c.gelu = GeluApproximation::tanh;
  } else if (act == "gelu") {
    c.gelu = GeluApproximation::none;
  } else {
    throw ValueError("read_hf_gpt2_config: " + path + ": activation_function \"" + act +
                     "\" is not supported (gelu_new, gelu_pytorch_tanh, gelu)");
  }
  c.dropout = 0.0;
  c.bias = true;
  c.validate();
  return c;
}

namespace {
void load_gpt2_tensors(nn::GPT& model, std::vector<std::pair<std::string, Tensor>> tensors) {
  nn::StateDict state;
  for (auto& [name, t] : tensors) {
    if (is_mask_buffer(name)) continue;
    // Some exports drop the "transformer." prefix (GPT2Model rather than GPT2LMHeadModel).
    std::string key =
        name.starts_with("transformer.") || name == "lm_head.weight" ? name : "transformer." + name;
    state.insert(key, is_conv1d_weight(key) ? t.t().contiguous() : t);
  }
  // The tied head is usually not stored: it is the token embedding.
  if (!state.contains("lm_head.weight") && state.contains("transformer.wte.weight")) {
    state.insert("lm_head.weight", state.at("transformer.wte.weight"));
  }
  NoGradGuard no_grad;
  model.load_state_dict(state, true);
}
}  // namespace

void load_hf_gpt2_weights(nn::GPT& model, const std::string& path) {
  load_gpt2_tensors(model, read_safetensors(path).tensors);
}

std::shared_ptr<nn::GPT> load_hf_gpt2(const std::string& dir) {
  const std::filesystem::path d(dir);
  auto model = std::make_shared<nn::GPT>(read_hf_gpt2_config((d / "config.json").string()));
  load_gpt2_tensors(*model, read_hf_weights(dir));
  return model;
}

void save_hf_gpt2(const nn::GPT& model, const std::string& dir, const HfSaveOptions& o) {
  const nn::GPTConfig& c = model.config;
  GRADUS_CHECK(c.bias, ValueError,
               "save_hf_gpt2: a GPT without biases (bias = false) has no "
               "transformers GPT2LMHeadModel equivalent");
  const DType dtype = o.dtype.value_or(model.wte->weight.dtype());
  nlohmann::json j{{"architectures", {"GPT2LMHeadModel"}},
                   {"model_type", "gpt2"},
                   {"vocab_size", c.vocab_size},
                   {"n_positions", c.block_size},
                   {"n_ctx", c.block_size},
                   {"n_embd", c.n_embd},
                   {"n_layer", c.n_layer},
                   {"n_head", c.n_head},
                   {"n_inner", nullptr},
                   {"activation_function", c.gelu == GeluApproximation::tanh ? "gelu_new" : "gelu"},
                   {"resid_pdrop", 0.0},
                   {"embd_pdrop", 0.0},
                   {"attn_pdrop", 0.0},
                   {"layer_norm_epsilon", c.layer_norm_eps},
                   {"initializer_range", 0.02},
                   {"tie_word_embeddings", true},
                   {"torch_dtype", hf_torch_dtype(dtype)}};
  std::vector<std::pair<std::string, Tensor>> weights;
  const nn::StateDict state = model.state_dict();
  for (const auto& [name, t] : state.items()) {
    if (name == "lm_head.weight") continue;  // tied: transformers does not store it
    weights.emplace_back(name, is_conv1d_weight(name) ? t.detach().t().contiguous() : t);
  }
  write_hf_directory(dir, j.dump(2) + "\n", weights, o);
}

}  // namespace gradus::io
