// Hugging Face transformers checkpoints both ways: a `save_pretrained` directory (config.json and
// model.safetensors, or model-0000i-of-0000n.safetensors shards named by
// model.safetensors.index.json) into gradus's language models, and gradus's models out as one that
// transformers' `from_pretrained` loads.
//
// LlamaForCausalLM maps onto nn::Llama name for name (the same Linear layouts and RoPE's
// "rotate half" layout: nothing is permuted); GPT2LMHeadModel onto nn::GPT through
// io/hf_gpt2.h's Conv1D transposes. A tied head is not stored, as transformers does not store it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradus/nn/gpt.h"
#include "gradus/nn/llama.h"

namespace gradus::io {

// config.json's "model_type" ("llama", "gpt2", ...). IOError when the file is missing or not
// JSON, ValueError when the key is absent.
std::string hf_model_type(const std::string& dir);

// Every tensor of the directory's weights: model.safetensors, or the shards its
// model.safetensors.index.json names (each read once; a name in the index but in no shard, or in
// a shard the index does not name, is an IOError).
std::vector<std::pair<std::string, Tensor>> read_hf_weights(const std::string& dir);

struct HfSaveOptions {
  // Weights above this many bytes are split into shards named by model.safetensors.index.json
  // (transformers' layout); tensors are never split.
  int64_t max_shard_bytes = int64_t{5} << 30;
  std::optional<DType> dtype;  // the parameters' own dtype when unset; "torch_dtype" follows
};

// Writes config.json (`config` serialised) and the weights into `dir` (created if missing). Each
// file is written atomically and config.json last, so a directory with a config is complete.
// Stale shards of an earlier save in `dir` are removed.
void write_hf_directory(const std::string& dir, const std::string& config_json,
                        const std::vector<std::pair<std::string, Tensor>>& weights,
                        const HfSaveOptions& options = {});

// LlamaConfig from a transformers LlamaConfig JSON file (hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim, max_position_embeddings,
// rms_norm_eps, rope_theta or rope_parameters, tie_word_embeddings, attention_bias, mlp_bias,
// vocab_size). RoPE scaling types other than "default", and activations other than silu, are
// refused by name.
nn::LlamaConfig read_hf_llama_config(const std::string& config_json_path);
// Copies the weights of a transformers directory into `model` (whose config must match them).
void load_hf_llama_weights(nn::Llama& model, const std::string& dir);
std::shared_ptr<nn::Llama> load_hf_llama(const std::string& dir);
void save_hf_llama(const nn::Llama& model, const std::string& dir,
                   const HfSaveOptions& options = {});

// GPT2LMHeadModel's directory from an nn::GPT (Conv1D weights [in, out], the tied head left out).
// A GPT without biases has no transformers equivalent: refused by name.
void save_hf_gpt2(const nn::GPT& model, const std::string& dir, const HfSaveOptions& options = {});

// config.json's "torch_dtype" for a dtype ("float32", "bfloat16", ...); ValueError for a dtype
// transformers has no parameters of.
std::string hf_torch_dtype(DType dtype);

// A language model of any supported family from a transformers directory, by its model_type.
std::shared_ptr<nn::Module> load_hf_causal_lm(const std::string& dir);

}  // namespace gradus::io
