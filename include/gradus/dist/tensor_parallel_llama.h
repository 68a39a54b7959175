// The Llama with every decoder layer split over the ranks of a tensor-parallel group
// (Megatron-style): each rank keeps n_head / size query heads and n_kv_head / size key/value
// heads (q/k/v_proj column-parallel, o_proj row-parallel: grouped-query attention stays within a
// rank, since query head j reads key/value head j / (n_head / n_kv_head)), and the SwiGLU MLP's
// hidden units (gate/up_proj column-parallel, down_proj row-parallel): one all-reduce forward and
// one backward per attention and per MLP. The vocabulary is split too: the token embedding's rows
// (VocabParallelEmbedding) and the output head's (column-parallel, or for a tied head the
// embedding's own rows: VocabParallelHead), so forward returns this rank's slice of the logits
// [B, T, vocab_size / size] and the loss is taken on the slices without gathering them
// (vocab_parallel_cross_entropy). The RMSNorms are replicated.
//
//   manual_seed(s);
//   auto llama = dist::tensor_parallel_llama(config, tp_group);  // == nn::Llama(config) after
//   dist::TensorParallelLayers view(llama, tp_group);            //    manual_seed(s)
//   Tensor logits = (*llama)(idx);                               // [B, T, V / size]
//   Tensor loss = dist::vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}),
//                                                    targets.reshape({-1}), tp_group);
//   view.full_state_dict();                                      // nn::Llama's names and shapes
//
// The model is an nn::Llama whose projections are swapped for their splits (same names, same
// order), so nn::llama_layers cuts it into pipeline stages as it cuts the one-process model.
#pragma once

#include <memory>

#include "gradus/dist/process_group.h"
#include "gradus/nn/llama.h"

namespace gradus::dist {

// Draws the one-process Llama from the current random state (leaving the generator where
// nn::Llama(config) leaves it) and keeps this rank's slices. ValueError naming the size that does
// not divide over the group (n_head, n_kv_head, ffn_hidden, vocab_size), or for attention dropout
// (a rank's heads are not rows of the one-process draw).
std::shared_ptr<nn::Llama> tensor_parallel_llama(const nn::LlamaConfig& config,
                                                 std::shared_ptr<ProcessGroup> group = nullptr);

}  // namespace gradus::dist
