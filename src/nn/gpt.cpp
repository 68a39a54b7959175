// GPT (gradus/nn/gpt.h): the blocks, the tied head and sampling.
#include "gradus/nn/gpt.h"

#include <cmath>
#include <limits>

#include "gradus/autograd.h"
#include "gradus/nn/init.h"

namespace gradus::nn {

void GPTConfig::validate() const {
  auto positive = [](int64_t v, const char* name) {
    GRADUS_CHECK(v > 0, ValueError, "GPTConfig: ", name, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(block_size, "block_size");
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_embd, "n_embd");
  GRADUS_CHECK(n_embd % n_head == 0, ValueError, "GPTConfig: n_embd (", n_embd,
               ") must be a multiple of n_head (", n_head, ")");
  GRADUS_CHECK(std::isfinite(dropout) && dropout >= 0 && dropout < 1, ValueError,
               "GPTConfig: dropout must be in [0, 1), got ", dropout);
  GRADUS_CHECK(std::isfinite(layer_norm_eps) && layer_norm_eps > 0, ValueError,
               "GPTConfig: layer_norm_eps must be positive, got ", layer_norm_eps);
}

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c)
    : n_head(c.n_head), attn_dropout(c.dropout) {
  c_attn = register_module("c_attn", std::make_shared<Linear>(c.n_embd, 3 * c.n_embd, c.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(c.n_embd, c.n_embd, c.bias));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(c.dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), hs = c / n_head;
  const std::vector<Tensor> qkv = split(c_attn->forward(x), c, 2);
  // [B, T, C] -> [B, H, T, hs]
  auto heads = [&](const Tensor& y) { return y.reshape({b, t, n_head, hs}).transpose(1, 2); };
  AttentionOptions o;
  o.causal = true;
  o.dropout_p = is_training() ? attn_dropout : 0.0;
  const Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), o);
  return resid_dropout->forward(c_proj->forward(y.transpose(1, 2).reshape({b, t, c})));
}

GPTMLP::GPTMLP(const GPTConfig& c) : gelu(c.gelu) {
  c_fc = register_module("c_fc", std::make_shared<Linear>(c.n_embd, 4 * c.n_embd, c.bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(4 * c.n_embd, c.n_embd, c.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(c.dropout));
}

Tensor GPTMLP::forward(const Tensor& x) {
  return dropout->forward(c_proj->forward(gradus::gelu(c_fc->forward(x), gelu)));
}

GPTBlock::GPTBlock(const GPTConfig& c) {
  ln_1 = register_module(
      "ln_1", std::make_shared<LayerNorm>(Shape{c.n_embd}, c.layer_norm_eps, true, c.bias));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(c));
  ln_2 = register_module(
      "ln_2", std::make_shared<LayerNorm>(Shape{c.n_embd}, c.layer_norm_eps, true, c.bias));
  mlp = register_module("mlp", std::make_shared<GPTMLP>(c));
}

Tensor GPTBlock::forward(const Tensor& x) {
  const Tensor y = add(x, (*attn)(ln_1->forward(x)));
  return add(y, (*mlp)(ln_2->forward(y)));
}

TiedLinear::TiedLinear(const Tensor& w) : weight(w) {
  register_parameter("weight", w, w.requires_grad());
}

Tensor TiedLinear::forward(const Tensor& x) {
  return linear(x, weight);
}

namespace {
// A named group of submodules (the "transformer" level of the state_dict names).
class ModuleDict : public Module {
 public:
  std::string type_name() const override { return "ModuleDict"; }
};
}  // namespace

namespace {
// Token + position embeddings, then dropout: ids [B, T] -> [B, T, C].
Tensor embed(Embedding& wte, Embedding& wpe, Dropout& drop, int64_t block_size, const Tensor& idx) {
  GRADUS_CHECK(idx.dim() == 2 && idx.dtype() == DType::i64, ValueError,
               "GPT: expects token ids [batch, time] of dtype int64, got ", shape_str(idx.sizes()),
               " ", dtype_name(idx.dtype()));
  const int64_t t = idx.size(1);
  GRADUS_CHECK(t <= block_size, ValueError, "GPT: sequence of ", t,
               " tokens is longer than the context (block_size ", block_size, ")");
  const Tensor pos = arange(t, {.dtype = DType::i64, .device = idx.device()});
  return drop.forward(add(wte.forward(idx), wpe.forward(pos)));
}
}  // namespace

GPT::GPT(const GPTConfig& c) : config(c) {
  c.validate();
  transformer = register_module("transformer", std::make_shared<ModuleDict>());
  wte = transformer->register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  wpe = transformer->register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd));
  drop = transformer->register_module("drop", std::make_shared<Dropout>(c.dropout));
  h = transformer->register_module("h", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<GPTBlock>(c));
  ln_f = transformer->register_module(
      "ln_f", std::make_shared<LayerNorm>(Shape{c.n_embd}, c.layer_norm_eps, true, c.bias));
  lm_head = register_module("lm_head", std::make_shared<TiedLinear>(wte->weight));

  NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (auto& [name, p] : named_parameters()) {
    if (name.find(".ln_") != std::string::npos || name.find("ln_f.") != std::string::npos) {
      continue;  // LayerNorms keep ones / zeros
    }
    if (name.ends_with(".bias")) {
      init::zeros_(p);
    } else if (name.find("c_proj.weight") != std::string::npos) {
      init::normal_(p, 0.0, residual_std);
    } else {
      init::normal_(p, 0.0, 0.02);
    }
  }
}

Tensor GPT::forward(const Tensor& idx) {
  const Tensor x = embed(*wte, *wpe, *drop, config.block_size, idx);
  const std::vector<std::shared_ptr<Module>> blocks(h->begin(), h->end());
  return lm_head->forward(ln_f->forward(forward_chain(blocks, x, checkpoint_every)));
}

Tensor GPT::generate(const Tensor& idx, const GenerateOptions& options) {
  return nn::generate(*this, config.block_size, idx, options);
}

GPTEmbedding::GPTEmbedding(const GPT& gpt) : block_size(gpt.config.block_size) {
  wte = register_module("wte", gpt.wte);
  wpe = register_module("wpe", gpt.wpe);
  drop = register_module("drop", gpt.drop);
}

Tensor GPTEmbedding::forward(const Tensor& idx) {
  return embed(*wte, *wpe, *drop, block_size, idx);
}

GPTLayers gpt_layers(const GPT& gpt) {
  return decoder_layers(std::make_shared<GPTEmbedding>(gpt), "transformer", *gpt.h, "transformer.h",
                        gpt.ln_f, "transformer.ln_f", gpt.lm_head, "lm_head");
}

}  // namespace gradus::nn
