// A GPT (GPT-2's architecture): token + position embeddings, pre-norm blocks of causal multi-head
// self-attention and a GELU MLP, a final LayerNorm and an output head tied to the token embedding.
//
// The state_dict names are nanoGPT's and Hugging Face's (transformer.wte.weight,
// transformer.h.0.attn.c_attn.weight, ..., lm_head.weight shared with transformer.wte.weight), with
// PyTorch Linear layouts [out, in]; io::load_hf_gpt2 transposes Hugging Face's Conv1D [in, out]
// weights on load. GPTConfig::gpt2() (124M) has the published 124,439,808 parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gradus/core/random.h"
#include "gradus/nn/container.h"
#include "gradus/nn/language_model.h"
#include "gradus/nn/layers.h"

namespace gradus::nn {

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // the longest context
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;  // embeddings, attention probabilities, residual branches
  bool bias = true;      // in the Linears and LayerNorms (GPT-2: true)
  GeluApproximation gelu = GeluApproximation::tanh;  // GPT-2's "gelu_new"
  double layer_norm_eps = 1e-5;

  static GPTConfig gpt2() { return {}; }  // 124M
  // Throws ValueError naming the field when a size is not positive or n_embd % n_head != 0.
  void validate() const;
};

class CausalSelfAttention : public Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]
  std::shared_ptr<Linear> c_attn, c_proj;    // [3C, C] (q, k, v stacked), [C, C]
  std::shared_ptr<Dropout> resid_dropout;
  int64_t n_head;
  double attn_dropout;
};

class GPTMLP : public Module {
 public:
  explicit GPTMLP(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MLP"; }
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> dropout;
  GeluApproximation gelu;
};

class GPTBlock : public Module {
 public:
  explicit GPTBlock(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;  // x + attn(ln_1(x)), then x + mlp(ln_2(x))
  std::string type_name() const override { return "Block"; }
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<GPTMLP> mlp;
};

// x W^T with a weight owned by another module (GPT's head shares the token embedding's).
class TiedLinear : public Module {
 public:
  explicit TiedLinear(const Tensor& weight);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }
  Tensor weight;
};

class GPT : public Module {
 public:
  // Initialised like GPT-2 / nanoGPT: N(0, 0.02) weights and embeddings, zero biases, and the
  // residual projections (c_proj) N(0, 0.02 / sqrt(2 n_layer)).
  explicit GPT(const GPTConfig& config);
  // idx [B, T] (i64 token ids, T <= block_size) -> logits [B, T, vocab_size].
  Tensor forward(const Tensor& idx) override;
  // Appends max_new_tokens sampled tokens to idx [B, T] (eval mode, no gradient), feeding at most
  // block_size tokens back each step. Returns [B, T + max_new_tokens].
  Tensor generate(const Tensor& idx, const GenerateOptions& options);
  std::string type_name() const override { return "GPT"; }

  GPTConfig config;
  std::shared_ptr<Module> transformer;  // wte, wpe, drop, h, ln_f
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  std::shared_ptr<ModuleList> h;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<TiedLinear> lm_head;  // weight is wte's weight
  // Activation checkpointing: every k blocks are one segment recomputed in backward (0: off).
  int64_t checkpoint_every = 0;
};

// The token and position embeddings (and the dropout after their sum) of a GPT, as one layer:
// ids [B, T] -> [B, T, C]. Shares the GPT's modules.
class GPTEmbedding : public Module {
 public:
  explicit GPTEmbedding(const GPT& gpt);
  Tensor forward(const Tensor& idx) override;
  std::string type_name() const override { return "GPTEmbedding"; }
  std::shared_ptr<Embedding> wte, wpe;
  std::shared_ptr<Dropout> drop;
  int64_t block_size;
};

// A GPT as a sequence of layers for a pipeline: the embeddings, each block, the final LayerNorm and
// the (tied) head, at paths "transformer", "transformer.h.0", ..., "transformer.ln_f", "lm_head".
using GPTLayers = LayerSequence;
GPTLayers gpt_layers(const GPT& gpt);

}  // namespace gradus::nn
