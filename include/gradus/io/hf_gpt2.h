// Hugging Face GPT-2 checkpoints (a transformers `save_pretrained` directory: config.json and
// model.safetensors) into nn::GPT.
//
// transformers stores the attention and MLP projections as Conv1D weights [in, out]; they are
// transposed to Linear's [out, in] on load. Its non-persistent attention-mask buffers
// ("attn.bias", "attn.masked_bias") are ignored when an older file has them, and lm_head.weight
// (tied, usually not stored) is the token embedding. Every other tensor must be present with the
// right shape: one error lists what is missing, unexpected or mis-shaped.
#pragma once

#include <memory>
#include <string>

#include "gradus/nn/gpt.h"

namespace gradus::io {

// GPTConfig from a transformers GPT2Config JSON file (n_layer, n_head, n_embd, n_positions,
// vocab_size, layer_norm_epsilon, activation_function, resid/embd/attn_pdrop). Dropout is set to
// 0 (fine-tuning chooses its own); activations other than gelu_new / gelu / gelu_pytorch_tanh
// are refused by name.
nn::GPTConfig read_hf_gpt2_config(const std::string& config_json_path);

// Copies the weights of `safetensors_path` into `model` (whose config must match the file).
void load_hf_gpt2_weights(nn::GPT& model, const std::string& safetensors_path);

// Builds the model from `dir`/config.json and loads its weights (model.safetensors, or the shards
// of model.safetensors.index.json).
std::shared_ptr<nn::GPT> load_hf_gpt2(const std::string& dir);

}  // namespace gradus::io
