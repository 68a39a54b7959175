// Llama (gradus/nn/llama.h): grouped-query attention with RoPE, the SwiGLU MLP, the decoder layers.
#include "gradus/nn/llama.h"

#include <cmath>

#include "gradus/autograd.h"
#include "gradus/nn/init.h"

namespace gradus::nn {

int64_t LlamaConfig::default_ffn_hidden(int64_t n_embd, int64_t multiple_of) {
  const int64_t hidden = 2 * 4 * n_embd / 3;
  return (hidden + multiple_of - 1) / multiple_of * multiple_of;
}

void LlamaConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    GRADUS_CHECK(v > 0, ValueError, "LlamaConfig: ", name, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(block_size, "block_size");
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_kv_head, "n_kv_head");
  positive(n_embd, "n_embd");
  positive(ffn_hidden, "ffn_hidden");
  GRADUS_CHECK(head_dim >= 0, ValueError, "LlamaConfig: head_dim must be >= 0, got ", head_dim);
  GRADUS_CHECK(head_dim > 0 || n_embd % n_head == 0, ValueError, "LlamaConfig: n_embd (", n_embd,
               ") must be a multiple of n_head (", n_head, ")");
  GRADUS_CHECK(n_head % n_kv_head == 0, ValueError, "LlamaConfig: n_head (", n_head,
               ") must be a multiple of n_kv_head (", n_kv_head, ")");
  GRADUS_CHECK(head_size() % 2 == 0, ValueError, "LlamaConfig: the head size (", head_size(),
               ") must be even for rotary embeddings");
  GRADUS_CHECK(std::isfinite(rms_norm_eps) && rms_norm_eps > 0, ValueError,
               "LlamaConfig: rms_norm_eps must be positive, got ", rms_norm_eps);
  GRADUS_CHECK(std::isfinite(rope_theta) && rope_theta > 0, ValueError,
               "LlamaConfig: rope_theta must be positive, got ", rope_theta);
  GRADUS_CHECK(std::isfinite(attention_dropout) && attention_dropout >= 0 && attention_dropout < 1,
               ValueError, "LlamaConfig: attention_dropout must be in [0, 1), got ",
               attention_dropout);
}

std::pair<Tensor, Tensor> RotaryCache::tables(int64_t positions, Device device, DType dtype) {
  auto& entry = cache_[{device.str(), dtype}];
  if (!entry.first.defined() || entry.first.size(0) < positions) {
    // Grow by doubling, so that generation past the context does not rebuild at every token.
    const int64_t n = std::max(positions, entry.first.defined() ? 2 * entry.first.size(0) : 0);
    entry = rotary_tables(n, head_dim_, theta_, {.dtype = dtype, .device = device});
  }
  if (entry.first.size(0) == positions) return entry;
  return {entry.first.narrow(0, 0, positions), entry.second.narrow(0, 0, positions)};
}

namespace {
// The projections of one input by these modules: one linears op where all of them are plain
// Linears (its backward sums x's gradient inside the GEMMs instead of adding one per
// projection), else each module's own forward (the tensor-parallel splits).
std::vector<Tensor> projections(const Tensor& x,
                                std::initializer_list<const std::shared_ptr<Module>*> modules) {
  std::vector<Tensor> weights, biases;
  for (const std::shared_ptr<Module>* m : modules) {
    const auto* linear = dynamic_cast<const Linear*>(m->get());
    if (linear == nullptr) {
      std::vector<Tensor> outs;
      for (const std::shared_ptr<Module>* each : modules) outs.push_back((*each)->forward(x));
      return outs;
    }
    weights.push_back(linear->weight);
    biases.push_back(linear->bias);
  }
  return linears(x, weights, biases);
}
}  // namespace

LlamaAttention::LlamaAttention(const LlamaConfig& c, std::shared_ptr<RotaryCache> rotary_)
    : n_head(c.n_head),
      n_kv_head(c.n_kv_head),
      head_dim(c.head_size()),
      attention_dropout(c.attention_dropout),
      rotary(std::move(rotary_)) {
  const int64_t q = c.n_head * head_dim, kv = c.n_kv_head * head_dim;
  q_proj = register_module("q_proj", std::make_shared<Linear>(c.n_embd, q, c.attention_bias));
  k_proj = register_module("k_proj", std::make_shared<Linear>(c.n_embd, kv, c.attention_bias));
  v_proj = register_module("v_proj", std::make_shared<Linear>(c.n_embd, kv, c.attention_bias));
  o_proj = register_module("o_proj", std::make_shared<Linear>(q, c.n_embd, c.attention_bias));
}

Tensor LlamaAttention::forward(const Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1);
  // [B, T, heads * hd] -> [B, heads, T, hd]
  auto heads = [&](const Tensor& y, int64_t h) {
    return y.reshape({b, t, h, head_dim}).transpose(1, 2);
  };
  const auto [cos, sin] = rotary->tables(t, x.device(), x.dtype());
  const std::vector<Tensor> qkv = projections(x, {&q_proj, &k_proj, &v_proj});
  const Tensor q = rotary_embedding(heads(qkv[0], n_head), cos, sin);
  const Tensor k = rotary_embedding(heads(qkv[1], n_kv_head), cos, sin);
  const Tensor v = heads(qkv[2], n_kv_head);
  AttentionOptions o;
  o.causal = true;
  o.dropout_p = is_training() ? attention_dropout : 0.0;
  // Each key/value head serves n_head / n_kv_head query heads (transformers' repeat_kv, without
  // the copies where the backend reads shared heads in place).
  o.enable_gqa = n_kv_head != n_head;
  const Tensor y = scaled_dot_product_attention(q, k, v, o);
  return o_proj->forward(y.transpose(1, 2).reshape({b, t, n_head * head_dim}));
}

LlamaMLP::LlamaMLP(const LlamaConfig& c) {
  gate_proj =
      register_module("gate_proj", std::make_shared<Linear>(c.n_embd, c.ffn_hidden, c.mlp_bias));
  up_proj =
      register_module("up_proj", std::make_shared<Linear>(c.n_embd, c.ffn_hidden, c.mlp_bias));
  down_proj =
      register_module("down_proj", std::make_shared<Linear>(c.ffn_hidden, c.n_embd, c.mlp_bias));
}

Tensor LlamaMLP::forward(const Tensor& x) {
  const std::vector<Tensor> gate_up = projections(x, {&gate_proj, &up_proj});
  return down_proj->forward(swiglu(gate_up[0], gate_up[1]));
}

LlamaDecoderLayer::LlamaDecoderLayer(const LlamaConfig& c, std::shared_ptr<RotaryCache> rotary) {
  input_layernorm =
      register_module("input_layernorm", std::make_shared<RMSNorm>(c.n_embd, c.rms_norm_eps));
  self_attn = register_module("self_attn", std::make_shared<LlamaAttention>(c, std::move(rotary)));
  post_attention_layernorm = register_module("post_attention_layernorm",
                                             std::make_shared<RMSNorm>(c.n_embd, c.rms_norm_eps));
  mlp = register_module("mlp", std::make_shared<LlamaMLP>(c));
}

Tensor LlamaDecoderLayer::forward(const Tensor& x) {
  const Tensor y = add(x, (*self_attn)(input_layernorm->forward(x)));
  return add(y, (*mlp)(post_attention_layernorm->forward(y)));
}

namespace {
// The "model" level of the state_dict names.
class LlamaModel : public Module {
 public:
  std::string type_name() const override { return "LlamaModel"; }
};

Tensor embed(Module& embed_tokens, const Tensor& idx) {
  GRADUS_CHECK(idx.dim() == 2 && idx.dtype() == DType::i64, ValueError,
               "Llama: expects token ids [batch, time] of dtype int64, got ",
               shape_str(idx.sizes()), " ", dtype_name(idx.dtype()));
  return embed_tokens.forward(idx);
}
}  // namespace

Llama::Llama(const LlamaConfig& c) : config(c) {
  c.validate();
  rotary = std::make_shared<RotaryCache>(c.head_size(), c.rope_theta);
  model = register_module("model", std::make_shared<LlamaModel>());
  auto embedding = std::make_shared<Embedding>(c.vocab_size, c.n_embd);
  embed_tokens = model->register_module("embed_tokens", embedding);
  layers = model->register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    layers->push_back(std::make_shared<LlamaDecoderLayer>(c, rotary));
  }
  norm = model->register_module("norm", std::make_shared<RMSNorm>(c.n_embd, c.rms_norm_eps));
  if (c.tie_embeddings) {
    lm_head = register_module("lm_head", std::make_shared<TiedLinear>(embedding->weight));
  } else {
    lm_head = register_module("lm_head", std::make_shared<Linear>(c.n_embd, c.vocab_size, false));
  }

  NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (auto& [name, p] : named_parameters()) {
    if (name.find("norm.") != std::string::npos) continue;  // RMSNorm weights stay one
    if (name.ends_with(".bias")) {
      init::zeros_(p);
    } else if (name.ends_with("o_proj.weight") || name.ends_with("down_proj.weight")) {
      init::normal_(p, 0.0, residual_std);
    } else {
      init::normal_(p, 0.0, 0.02);
    }
  }
}

Tensor Llama::forward(const Tensor& idx) {
  const Tensor x = embed(*embed_tokens, idx);
  const std::vector<std::shared_ptr<Module>> blocks(layers->begin(), layers->end());
  return lm_head->forward(norm->forward(forward_chain(blocks, x, checkpoint_every)));
}

Tensor Llama::generate(const Tensor& idx, const GenerateOptions& options) {
  return nn::generate(*this, config.block_size, idx, options);
}

LlamaEmbedding::LlamaEmbedding(const Llama& llama) {
  embed_tokens = register_module("embed_tokens", llama.embed_tokens);
}

Tensor LlamaEmbedding::forward(const Tensor& idx) {
  return embed(*embed_tokens, idx);
}

LayerSequence llama_layers(const Llama& llama) {
  return decoder_layers(std::make_shared<LlamaEmbedding>(llama), "model", *llama.layers,
                        "model.layers", llama.norm, "model.norm", llama.lm_head, "lm_head");
}

}  // namespace gradus::nn
