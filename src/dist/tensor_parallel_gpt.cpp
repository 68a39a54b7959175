#include "gradus/dist/tensor_parallel_gpt.h"

#include <cmath>
#include <limits>

#include "dist/gather.h"
#include "gradus/autograd.h"
#include "gradus/dist/tensor_parallel.h"
#include "gradus/dist/tensor_parallel_attention.h"
#include "gradus/nn/container.h"
#include "gradus/ops.h"

namespace gradus::dist {
namespace {

// nn::GPTMLP with its hidden layer split: c_fc column-parallel (not gathered), GELU on this rank's
// slice, c_proj row-parallel. One all-reduce forward and one backward.
class TensorParallelGPTMLP : public nn::Module {
 public:
  TensorParallelGPTMLP(const nn::GPTConfig& c, std::shared_ptr<ProcessGroup> group)
      : gelu_approximation(c.gelu) {
    c_fc = register_module("c_fc",
                           std::make_shared<ColumnParallelLinear>(c.n_embd, 4 * c.n_embd, c.bias,
                                                                  /*gather_output=*/false, group));
    c_proj = register_module("c_proj", std::make_shared<RowParallelLinear>(
                                           4 * c.n_embd, c.n_embd, c.bias,
                                           /*input_is_parallel=*/true, std::move(group)));
  }
  Tensor forward(const Tensor& x) override {
    return c_proj->forward(gelu((*c_fc)(x), gelu_approximation));
  }
  std::string type_name() const override { return "TensorParallelMLP"; }

  std::shared_ptr<ColumnParallelLinear> c_fc;
  std::shared_ptr<RowParallelLinear> c_proj;
  GeluApproximation gelu_approximation;
};

class TensorParallelBlock : public nn::Module {
 public:
  TensorParallelBlock(const nn::GPTConfig& c, const std::shared_ptr<ProcessGroup>& group) {
    ln_1 = register_module(
        "ln_1", std::make_shared<nn::LayerNorm>(Shape{c.n_embd}, c.layer_norm_eps, true, c.bias));
    attn = register_module("attn", std::make_shared<TensorParallelSelfAttention>(c, group));
    ln_2 = register_module(
        "ln_2", std::make_shared<nn::LayerNorm>(Shape{c.n_embd}, c.layer_norm_eps, true, c.bias));
    mlp = register_module("mlp", std::make_shared<TensorParallelGPTMLP>(c, group));
  }
  Tensor forward(const Tensor& x) override {
    const Tensor h = add(x, attn->forward(ln_1->forward(x)));
    return add(h, mlp->forward(ln_2->forward(h)));
  }
  std::string type_name() const override { return "Block"; }

  std::shared_ptr<nn::LayerNorm> ln_1, ln_2;
  std::shared_ptr<TensorParallelSelfAttention> attn;
  std::shared_ptr<TensorParallelGPTMLP> mlp;
};

// A plain container, named like nn::GPT's "transformer" so the names of the two models line up.
class Container : public nn::Module {
 public:
  std::string type_name() const override { return "ModuleDict"; }
};

// Copies `from` into the parameter `into` (same shape) without recording it.
void assign(const Tensor& into, const Tensor& from, const std::string& name) {
  GRADUS_CHECK(into.sizes() == from.sizes(), ShapeError,
               "TensorParallelGPT: load_full_state_dict: '", name, "' must be ",
               shape_str(into.sizes()), ", got ", shape_str(from.sizes()));
  NoGradGuard no_grad;
  Tensor target = into;
  target.copy_(from.to(into.device()).to(into.dtype()));
}

// The entries of `full` under `prefix`, without it.
nn::StateDict under(const nn::StateDict& full, const std::string& prefix) {
  nn::StateDict part;
  for (const auto& [name, t] : full) {
    if (name.rfind(prefix, 0) == 0) part.insert(name.substr(prefix.size()), t);
  }
  return part;
}

// Token (vocabulary-parallel) + position embeddings: ids [B, T] -> [B, T, C], the same on every
// rank.
Tensor embed(VocabParallelEmbedding& wte, nn::Embedding& wpe, int64_t block_size,
             const Tensor& idx) {
  GRADUS_CHECK(idx.dim() == 2 && idx.dtype() == DType::i64, ValueError,
               "TensorParallelGPT: expects token ids [batch, time] of dtype int64, got ",
               shape_str(idx.sizes()), " ", dtype_name(idx.dtype()));
  const int64_t t = idx.size(1);
  GRADUS_CHECK(t <= block_size, ValueError, "TensorParallelGPT: sequence of ", t,
               " tokens is longer than the context (block_size ", block_size, ")");
  const Tensor pos = arange(t, {.dtype = DType::i64, .device = idx.device()});
  return add(wte.forward(idx), wpe.forward(pos));
}

// -inf on the padded classes of this rank's logits (none: undefined), copied to where the logits
// are once per device and dtype rather than every forward (a host-to-device copy each step
// would wait for the device).
class PaddingMask {
 public:
  explicit PaddingMask(Tensor on_host = Tensor()) : host_(std::move(on_host)) {}
  bool defined() const { return host_.defined(); }
  const Tensor& like(const Tensor& logits) {
    if (!cached_.defined() || cached_.device() != logits.device() ||
        cached_.dtype() != logits.dtype()) {
      cached_ = host_.to(logits.device()).to(logits.dtype());
    }
    return cached_;
  }

 private:
  Tensor host_, cached_;
};

// The head: this rank's slice of the logits from the final features. The head is the embedding's
// rows of this rank; its input is replicated, so its gradient is the sum over the ranks' slices
// (copy_to_parallel_region). Padded classes get -inf.
Tensor head_logits(const Tensor& features, const Tensor& weight, PaddingMask& padding_mask,
                   const std::shared_ptr<ProcessGroup>& group) {
  Tensor logits = matmul(copy_to_parallel_region(features, group), weight.transpose(0, 1));
  if (padding_mask.defined()) logits = add(logits, padding_mask.like(logits));
  return logits;
}

// The embeddings and the head as layers of a pipeline (TensorParallelGPT::layers).
class EmbeddingsLayer : public nn::Module {
 public:
  EmbeddingsLayer(std::shared_ptr<VocabParallelEmbedding> token,
                  std::shared_ptr<nn::Embedding> position, int64_t block_size)
      : block_size_(block_size) {
    wte = register_module("wte", std::move(token));
    wpe = register_module("wpe", std::move(position));
  }
  Tensor forward(const Tensor& idx) override { return embed(*wte, *wpe, block_size_, idx); }
  std::string type_name() const override { return "TensorParallelEmbeddings"; }
  std::shared_ptr<VocabParallelEmbedding> wte;
  std::shared_ptr<nn::Embedding> wpe;

 private:
  int64_t block_size_;
};

class HeadLayer : public nn::Module {
 public:
  HeadLayer(const Tensor& tied, std::shared_ptr<PaddingMask> padding_mask,
            std::shared_ptr<ProcessGroup> group)
      : weight(tied), padding_mask_(std::move(padding_mask)), group_(std::move(group)) {
    register_parameter("weight", tied, tied.requires_grad());
  }
  Tensor forward(const Tensor& x) override {
    return head_logits(x, weight, *padding_mask_, group_);
  }
  std::string type_name() const override { return "TensorParallelHead"; }
  Tensor weight;  // the token embedding's rows of this rank

 private:
  std::shared_ptr<PaddingMask> padding_mask_;
  std::shared_ptr<ProcessGroup> group_;
};

}  // namespace

struct TensorParallelGPT::Impl {
  std::shared_ptr<nn::Module> transformer;
  std::shared_ptr<VocabParallelEmbedding> wte;
  std::shared_ptr<nn::Embedding> wpe;
  std::vector<std::shared_ptr<TensorParallelBlock>> blocks;
  std::shared_ptr<nn::LayerNorm> ln_f;
  // [padded_vocab / size]: 0, or -inf on padded classes (undefined if none); shared with layers().
  std::shared_ptr<PaddingMask> padding_mask = std::make_shared<PaddingMask>();
  bool has_lm_head_key;  // nn::GPT's state dict names the tied head's weight too
};

TensorParallelGPT::TensorParallelGPT(const nn::GPTConfig& c, std::shared_ptr<ProcessGroup> group)
    : config(c),
      impl_(std::make_shared<Impl>()),
      group_(group ? std::move(group) : default_group()) {
  c.validate();
  const int n = group_->size();
  GRADUS_CHECK(c.dropout == 0, ValueError, "TensorParallelGPT: dropout (", c.dropout,
               ") is not supported with tensor parallelism; train with dropout 0");
  GRADUS_CHECK(c.n_head % n == 0, ValueError, "TensorParallelGPT: ", c.n_head,
               " heads do not divide over ", n, " tensor-parallel rank(s)");
  padded_vocab = (c.vocab_size + n - 1) / n * n;

  // The one-device model, drawn exactly as nn::GPT draws it; the parallel layers below draw their
  // own copies (then overwritten with its slices), so the generator is put back where nn::GPT
  // leaves it.
  const nn::GPT full(c);
  const PhiloxState after_full = default_generator().state();
  Impl& m = *impl_;
  m.transformer = register_module("transformer", std::make_shared<Container>());
  m.wte = m.transformer->register_module(
      "wte", std::make_shared<VocabParallelEmbedding>(padded_vocab, c.n_embd, group_));
  m.wpe = m.transformer->register_module("wpe",
                                         std::make_shared<nn::Embedding>(c.block_size, c.n_embd));
  auto h = m.transformer->register_module("h", std::make_shared<nn::ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i) {
    m.blocks.push_back(std::make_shared<TensorParallelBlock>(c, group_));
    h->push_back(m.blocks.back());
  }
  m.ln_f = m.transformer->register_module(
      "ln_f", std::make_shared<nn::LayerNorm>(Shape{c.n_embd}, c.layer_norm_eps, true, c.bias));
  const nn::StateDict full_state = full.state_dict();
  m.has_lm_head_key = full_state.contains("lm_head.weight");
  load_full_state_dict(full_state);
  default_generator().set_state(after_full);

  const int64_t local = padded_vocab / n, first = group_->rank() * local;
  if (padded_vocab != c.vocab_size && first + local > c.vocab_size) {
    std::vector<double> mask(static_cast<size_t>(local), 0.0);
    for (int64_t j = std::max<int64_t>(0, c.vocab_size - first); j < local; ++j) {
      mask[static_cast<size_t>(j)] = -std::numeric_limits<double>::infinity();
    }
    m.padding_mask = std::make_shared<PaddingMask>(tensor(mask, {local}));
  }
}

Tensor TensorParallelGPT::forward(const Tensor& idx) {
  GRADUS_CHECK(idx.dim() == 2 && idx.dtype() == DType::i64, ValueError,
               "TensorParallelGPT: expects token ids [batch, time] of dtype int64, got ",
               shape_str(idx.sizes()), " ", dtype_name(idx.dtype()));
  const int64_t t = idx.size(1);
  GRADUS_CHECK(t <= config.block_size, ValueError, "TensorParallelGPT: sequence of ", t,
               " tokens is longer than the context (block_size ", config.block_size, ")");
  const Impl& m = *impl_;
  Tensor x = embed(*m.wte, *m.wpe, config.block_size, idx);
  for (const auto& block : m.blocks) x = (*block)(x);
  return head_logits(m.ln_f->forward(x), m.wte->weight, *m.padding_mask, group_);
}

nn::GPTLayers TensorParallelGPT::layers() const {
  const Impl& m = *impl_;
  nn::GPTLayers out{std::make_shared<nn::Sequential>(), {"transformer"}};
  out.layers->push_back(std::make_shared<EmbeddingsLayer>(m.wte, m.wpe, config.block_size));
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    out.layers->push_back(m.blocks[i]);
    out.paths.push_back("transformer.h." + std::to_string(i));
  }
  out.layers->push_back(m.ln_f);
  out.paths.push_back("transformer.ln_f");
  out.layers->push_back(std::make_shared<HeadLayer>(m.wte->weight, m.padding_mask, group_));
  out.paths.push_back("lm_head");
  return out;
}

Tensor TensorParallelGPT::loss(const Tensor& logits_shard, const Tensor& targets) const {
  return vocab_parallel_cross_entropy(logits_shard.reshape({-1, logits_shard.size(-1)}),
                                      targets.reshape({-1}), group_);
}

// How a parameter is split: which one-process rows or columns this rank holds.
enum class TensorParallelGPT::Split { replicated, vocab_rows, qkv_rows, rows, columns };

TensorParallelGPT::Split TensorParallelGPT::split_of(const Tensor& p) const {
  const Impl& m = *impl_;
  const auto same = [&p](const Tensor& t) { return t.defined() && t.impl() == p.impl(); };
  if (same(m.wte->weight)) return Split::vocab_rows;
  for (const auto& b : m.blocks) {
    if (same(b->attn->qkv_weight) || same(b->attn->qkv_bias)) return Split::qkv_rows;
    if (same(b->mlp->c_fc->weight) || same(b->mlp->c_fc->bias)) return Split::rows;
    if (same(b->attn->proj_weight) || same(b->mlp->c_proj->weight)) return Split::columns;
  }
  return Split::replicated;
}

bool TensorParallelGPT::is_shard(const Tensor& p) const {
  return split_of(p) != Split::replicated;
}

Tensor TensorParallelGPT::gather_shards(const Tensor& p, const Tensor& local) const {
  const Split split = split_of(p);
  if (split == Split::replicated) return local;
  GRADUS_CHECK(local.sizes() == p.sizes(), ShapeError,
               "TensorParallelGPT::gather_shards: expected a tensor shaped like the parameter ",
               shape_str(p.sizes()), ", got ", shape_str(local.sizes()));
  if (split == Split::qkv_rows) {
    return detail::gather_qkv(local.contiguous(), *group_, local.size(0) / 3, "gather_shards");
  }
  const std::vector<Tensor> parts =
      detail::gather_from_every_rank(local.detach().contiguous(), *group_, "gather_shards");
  if (split == Split::columns) return cat(parts, 1);
  const Tensor rows = cat(parts, 0);
  return split == Split::vocab_rows ? rows.narrow(0, 0, config.vocab_size).contiguous() : rows;
}

Tensor TensorParallelGPT::take_shard(const Tensor& p, const Tensor& full) const {
  const Split split = split_of(p);
  const int64_t r = group_->rank(), n = group_->size();
  switch (split) {
    case Split::replicated:
      return full;
    case Split::vocab_rows: {  // this rank's rows; rows past the vocabulary (padding) are zero
      const int64_t local = p.size(0), first = r * local;
      Tensor rows = zeros(p.sizes(), {.dtype = full.dtype(), .device = full.device()});
      const int64_t real = std::max<int64_t>(0, std::min(local, full.size(0) - first));
      if (real > 0) {
        NoGradGuard no_grad;
        rows.narrow(0, 0, real).copy_(full.narrow(0, first, real));
      }
      return rows;
    }
    case Split::rows: {
      const int64_t k = full.size(0) / n;
      return full.narrow(0, r * k, k).contiguous();
    }
    case Split::columns: {
      const int64_t k = full.size(1) / n;
      return full.narrow(1, r * k, k).contiguous();
    }
    case Split::qkv_rows: {
      const int64_t c = full.size(0) / 3;
      return detail::qkv_rows(full, c, r, c / n);
    }
  }
  return full;
}

nn::StateDict TensorParallelGPT::full_state_dict() const {
  const Impl& m = *impl_;
  nn::StateDict d;
  const Tensor wte = m.wte->full_state_dict().at("weight").narrow(0, 0, config.vocab_size);
  d.insert("transformer.wte.weight", wte);
  d.insert("transformer.wpe.weight", m.wpe->weight.detach());
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    const TensorParallelBlock& b = *m.blocks[i];
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    for (const auto& [name, t] : b.ln_1->state_dict()) d.insert(p + "ln_1." + name, t);
    for (const auto& [name, t] : b.attn->full_state_dict()) d.insert(p + "attn." + name, t);
    for (const auto& [name, t] : b.ln_2->state_dict()) d.insert(p + "ln_2." + name, t);
    for (const auto& [name, t] : b.mlp->c_fc->full_state_dict())
      d.insert(p + "mlp.c_fc." + name, t);
    for (const auto& [name, t] : b.mlp->c_proj->full_state_dict()) {
      d.insert(p + "mlp.c_proj." + name, t);
    }
  }
  for (const auto& [name, t] : m.ln_f->state_dict()) d.insert("transformer.ln_f." + name, t);
  if (m.has_lm_head_key) d.insert("lm_head.weight", wte);
  return d;
}

void TensorParallelGPT::load_full_state_dict(const nn::StateDict& full) {
  const Impl& m = *impl_;
  const Tensor& wte = full.at("transformer.wte.weight");
  GRADUS_CHECK(wte.dim() == 2 && wte.size(0) == config.vocab_size && wte.size(1) == config.n_embd,
               ShapeError,
               "TensorParallelGPT: load_full_state_dict: 'transformer.wte.weight' must be [",
               config.vocab_size, ", ", config.n_embd, "], got ", shape_str(wte.sizes()));
  assign(m.wte->weight, take_shard(m.wte->weight, wte.detach()), "transformer.wte.weight");
  assign(m.wpe->weight, full.at("transformer.wpe.weight"), "transformer.wpe.weight");
  for (size_t i = 0; i < m.blocks.size(); ++i) {
    TensorParallelBlock& b = *m.blocks[i];
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    b.ln_1->load_state_dict(under(full, p + "ln_1."));
    b.attn->load_full_state_dict(under(full, p + "attn."));
    b.ln_2->load_state_dict(under(full, p + "ln_2."));
    b.mlp->c_fc->load_full_state_dict(under(full, p + "mlp.c_fc."));
    b.mlp->c_proj->load_full_state_dict(under(full, p + "mlp.c_proj."));
  }
  m.ln_f->load_state_dict(under(full, "transformer.ln_f."));
}

}  // namespace gradus::dist
