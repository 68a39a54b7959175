// The tensor-parallel Llama (gradus/dist/tensor_parallel_llama.h): an nn::Llama with its
// projections swapped for column- and row-parallel splits.
#include "gradus/dist/tensor_parallel_llama.h"

#include "gradus/autograd.h"
#include "gradus/dist/tensor_parallel.h"

namespace gradus::dist {

std::shared_ptr<nn::Llama> tensor_parallel_llama(const nn::LlamaConfig& c,
                                                 std::shared_ptr<ProcessGroup> group) {
  if (!group) group = default_group();
  const int64_t size = group->size();
  auto divides = [&](int64_t value, const char* what) {
    GRADUS_CHECK(value % size == 0, ValueError, "tensor_parallel_llama: ", what, " (", value,
                 ") does not divide over the ", size, " ranks of the tensor-parallel group");
  };
  divides(c.n_head, "n_head");
  divides(c.n_kv_head, "n_kv_head");
  divides(c.ffn_hidden, "ffn_hidden");
  divides(c.vocab_size, "vocab_size");
  GRADUS_CHECK(c.attention_dropout == 0, ValueError, "tensor_parallel_llama: attention_dropout ",
               c.attention_dropout,
               " cannot be split over ranks (a rank's heads are not rows of the one-process draw)");

  // The one-process model as the one-process run draws it; its weights are what the splits take.
  auto model = std::make_shared<nn::Llama>(c);
  const nn::StateDict full = model->state_dict();
  // The splits draw weights of their own: the generator is put back afterwards.
  const PhiloxState rng = default_generator().state();
  const int64_t q = c.n_head * c.head_size(), kv = c.n_kv_head * c.head_size();
  for (const auto& child : *model->layers) {
    auto& layer = dynamic_cast<nn::LlamaDecoderLayer&>(*child);
    nn::LlamaAttention& attn = *layer.self_attn;
    const bool ab = c.attention_bias;
    auto column = [&](int64_t in, int64_t out, bool bias) {
      return std::make_shared<ColumnParallelLinear>(in, out, bias, /*gather_output=*/false, group);
    };
    auto row = [&](int64_t in, int64_t out, bool bias) {
      return std::make_shared<RowParallelLinear>(in, out, bias, /*input_is_parallel=*/true, group);
    };
    // (The same names in the same places: the state dict's names stay nn::Llama's.)
    auto swap = [](nn::Module& parent, const char* name, std::shared_ptr<nn::Module> split) {
      parent.replace_module(name, split);
      return split;
    };
    attn.q_proj = swap(attn, "q_proj", column(c.n_embd, q, ab));
    attn.k_proj = swap(attn, "k_proj", column(c.n_embd, kv, ab));
    attn.v_proj = swap(attn, "v_proj", column(c.n_embd, kv, ab));
    attn.o_proj = swap(attn, "o_proj", row(q, c.n_embd, ab));
    attn.n_head = c.n_head / size;
    attn.n_kv_head = c.n_kv_head / size;
    nn::LlamaMLP& mlp = *layer.mlp;
    mlp.gate_proj = swap(mlp, "gate_proj", column(c.n_embd, c.ffn_hidden, c.mlp_bias));
    mlp.up_proj = swap(mlp, "up_proj", column(c.n_embd, c.ffn_hidden, c.mlp_bias));
    mlp.down_proj = swap(mlp, "down_proj", row(c.ffn_hidden, c.n_embd, c.mlp_bias));
  }
  // The vocabulary split: the embedding's rows, and the head's (its logits stay this rank's
  // classes, for dist::vocab_parallel_cross_entropy).
  auto embedding = std::make_shared<VocabParallelEmbedding>(c.vocab_size, c.n_embd, group);
  model->embed_tokens = embedding;
  model->model->replace_module("embed_tokens", embedding);
  if (c.tie_embeddings) {
    model->lm_head = std::make_shared<VocabParallelHead>(*embedding);
  } else {
    model->lm_head = std::make_shared<ColumnParallelLinear>(c.n_embd, c.vocab_size, false,
                                                            /*gather_output=*/false, group);
  }
  model->replace_module("lm_head", model->lm_head);
  default_generator().set_state(rng);
  TensorParallelLayers(model, group).load_full_state_dict(full);
  return model;
}

}  // namespace gradus::dist
