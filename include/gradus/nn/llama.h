// A Llama-family causal language model: token embeddings, pre-norm decoder layers of grouped-query
// self-attention with rotary position embeddings (RoPE) and a SwiGLU MLP, RMSNorm, and an output
// head (untied by default, as Llama 2/3; tied as in the small Llama 3.2 models).
//
// The state_dict names are those of transformers' LlamaForCausalLM (model.embed_tokens.weight,
// model.layers.0.self_attn.q_proj.weight, ..., model.norm.weight, lm_head.weight) with the same
// [out, in] layouts and RoPE's "rotate half" layout, so a Hugging Face checkpoint loads and saves
// without renaming or permuting (io/hf.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "gradus/nn/gpt.h"
#include "gradus/nn/language_model.h"
#include "gradus/nn/layers.h"

namespace gradus::nn {

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t block_size = 2048;  // the training context (max_position_embeddings); RoPE goes beyond
  int64_t n_layer = 32;
  int64_t n_head = 32;
  int64_t n_kv_head = 32;  // grouped-query attention: n_head is a multiple of it (1: multi-query)
  int64_t n_embd = 4096;
  int64_t ffn_hidden = 11008;  // the SwiGLU MLP's width (intermediate_size)
  int64_t head_dim = 0;        // 0: n_embd / n_head
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_embeddings = false;  // lm_head shares embed_tokens' weight
  bool attention_bias = false;  // biases in q/k/v/o_proj
  bool mlp_bias = false;        // biases in gate/up/down_proj
  double attention_dropout = 0.0;

  static LlamaConfig llama2_7b() { return {}; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  // Llama's rule for the MLP width: 2/3 of 4 n_embd, rounded up to a multiple of `multiple_of`.
  static int64_t default_ffn_hidden(int64_t n_embd, int64_t multiple_of = 256);
  // Throws ValueError naming the field when a size is not positive, n_head is not a multiple of
  // n_kv_head, the head size is odd (RoPE rotates pairs) or n_embd % n_head != 0 without head_dim.
  void validate() const;
};

// The cos/sin tables of RoPE, shared by a model's attention layers and extended on demand: one
// copy per device and dtype, computed in float64.
class RotaryCache {
 public:
  RotaryCache(int64_t head_dim, double theta) : head_dim_(head_dim), theta_(theta) {}
  // cos and sin [positions, head_dim / 2] in `dtype` on `device`.
  std::pair<Tensor, Tensor> tables(int64_t positions, Device device, DType dtype);

 private:
  int64_t head_dim_;
  double theta_;
  std::map<std::pair<std::string, DType>, std::pair<Tensor, Tensor>> cache_;
};

class LlamaAttention : public Module {
 public:
  LlamaAttention(const LlamaConfig& config, std::shared_ptr<RotaryCache> rotary);
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C], causal
  std::string type_name() const override { return "LlamaAttention"; }
  // Linears (or their tensor-parallel splits: dist::tensor_parallel_llama, where n_head and
  // n_kv_head are this rank's heads).
  std::shared_ptr<Module> q_proj, k_proj, v_proj, o_proj;
  int64_t n_head, n_kv_head, head_dim;
  double attention_dropout;
  std::shared_ptr<RotaryCache> rotary;
  // Activation checkpointing: every k decoder layers are one segment recomputed in backward (0:
  // off).
  int64_t checkpoint_every = 0;
};

// down_proj(silu(gate_proj(x)) * up_proj(x))
class LlamaMLP : public Module {
 public:
  explicit LlamaMLP(const LlamaConfig& config);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LlamaMLP"; }
  std::shared_ptr<Module> gate_proj, up_proj, down_proj;  // Linears, or their splits
};

class LlamaDecoderLayer : public Module {
 public:
  LlamaDecoderLayer(const LlamaConfig& config, std::shared_ptr<RotaryCache> rotary);
  // x + self_attn(input_layernorm(x)), then x + mlp(post_attention_layernorm(x))
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LlamaDecoderLayer"; }
  std::shared_ptr<RMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<LlamaAttention> self_attn;
  std::shared_ptr<LlamaMLP> mlp;
};

class Llama : public Module {
 public:
  // Initialised N(0, 0.02) (embeddings and projections), zero biases, RMSNorm weights one, and
  // the residual projections (o_proj, down_proj) N(0, 0.02 / sqrt(2 n_layer)) as GPT-2.
  explicit Llama(const LlamaConfig& config);
  // idx [B, T] (i64 token ids) -> logits [B, T, vocab_size]. T may exceed block_size (RoPE has no
  // table to outgrow); training and generation use windows of block_size.
  Tensor forward(const Tensor& idx) override;
  Tensor generate(const Tensor& idx, const GenerateOptions& options);
  std::string type_name() const override { return "LlamaForCausalLM"; }

  LlamaConfig config;
  std::shared_ptr<Module> model;  // embed_tokens, layers, norm
  // An Embedding (a tensor-parallel split swaps in its own: dist::tensor_parallel_llama).
  std::shared_ptr<Module> embed_tokens;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<Module> lm_head;  // Linear, or TiedLinear over embed_tokens' weight
  std::shared_ptr<RotaryCache> rotary;
  // Activation checkpointing: every k decoder layers are one segment recomputed in backward (0:
  // off).
  int64_t checkpoint_every = 0;
};

// The token embedding of a Llama as a layer: ids [B, T] -> [B, T, C] (shares the model's module).
class LlamaEmbedding : public Module {
 public:
  explicit LlamaEmbedding(const Llama& llama);
  Tensor forward(const Tensor& idx) override;
  std::string type_name() const override { return "LlamaEmbedding"; }
  std::shared_ptr<Module> embed_tokens;
};

// A Llama as layers for a pipeline: the embedding, each decoder layer, the final norm and the
// head, at paths "model", "model.layers.0", ..., "model.norm", "lm_head".
LayerSequence llama_layers(const Llama& llama);

}  // namespace gradus::nn
