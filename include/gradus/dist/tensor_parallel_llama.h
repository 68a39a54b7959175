// The Llama with every decoder layer split over the ranks of a tensor-parallel group
// (Megatron-style): each rank keeps n_head / size query heads and n_kv_head / size key/value
// heads (q/k/v_proj column-parallel, o_proj row-parallel: grouped-query attention stays within a
// rank, since query head j reads key/value head j / (n_head / n_kv_head)), and the SwiGLU MLP's
// hidden units (gate/up_proj column-parallel, down_proj row-parallel): one all-reduce forward and
// one backward per attention and per MLP. The output head is split by vocabulary rows
// (column-parallel) and its logits all-gathered, so forward returns the full logits on every
// rank; the token embedding and the RMSNorms are replicated.
//
//   manual_seed(s);
//   auto llama = dist::tensor_parallel_llama(config, tp_group);  // == nn::Llama(config) after
//   dist::TensorParallelLayers view(llama, tp_group);            //    manual_seed(s)
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
// not divide over the group (n_head, n_kv_head, ffn_hidden, vocab_size), for a tied head, or for
// attention dropout (a rank's heads are not rows of the one-process draw).
std::shared_ptr<nn::Llama> tensor_parallel_llama(const nn::LlamaConfig& config,
                                                 std::shared_ptr<ProcessGroup> group = nullptr);

}  // namespace gradus::dist
