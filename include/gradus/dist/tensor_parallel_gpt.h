// The GPT with every block split over the ranks of a tensor-parallel group (Megatron-style):
// attention heads (TensorParallelSelfAttention), the MLP's hidden layer (column- then
// row-parallel), and the vocabulary of the token embedding and of the output head tied to it.
// Each rank's forward returns its slice of the logits; the loss is taken on the slices
// (vocab_parallel_cross_entropy), so the [B, T, V] logits are never gathered.
//
//   manual_seed(s);
//   dist::TensorParallelGPT gpt(config, tp_group);      // == nn::GPT(config) built after
//   manual_seed(s) Tensor loss = gpt.loss(gpt(idx), targets);          // ==
//   cross_entropy(nn::GPT(idx), targets)
//
// A vocabulary that does not divide over the group is padded to the next multiple (as Megatron
// does); the padded rows are never looked up and their logits are -inf, so the model computes what
// the unpadded one does. full_state_dict() gathers nn::GPT's state dict (its names and shapes,
// unpadded); load_full_state_dict() takes this rank's slices of one. Dropout must be 0 (attention
// dropout cannot match the one-device draw; TensorParallelSelfAttention says so).
#pragma once

#include <memory>

#include "gradus/dist/process_group.h"
#include "gradus/dist/tensor_parallel.h"
#include "gradus/nn/gpt.h"

namespace gradus::dist {

class TensorParallelGPT : public nn::Module, public TensorParallelModule {
 public:
  // Draws the one-device GPT from the current random state (as nn::GPT(config) would, leaving the
  // generator where nn::GPT leaves it) and keeps this rank's slices. ValueError when n_head or the
  // MLP width does not divide over the group, or config.dropout > 0.
  explicit TensorParallelGPT(const nn::GPTConfig& config,
                             std::shared_ptr<ProcessGroup> group = nullptr);
  // idx [B, T] -> this rank's logits [B, T, padded_vocab / size] (padding at -inf).
  Tensor forward(const Tensor& idx) override;
  // The model as a sequence of layers sharing its modules, for a pipeline (nn::gpt_layers' shape
  // and paths): the embeddings, each block, the final LayerNorm, the head (this rank's slice of
  // the logits, from the token embedding's rows: a weight tied across the first and last stage).
  nn::GPTLayers layers() const;
  // Mean next-token cross-entropy of forward's logits against targets [B, T] (a collective).
  Tensor loss(const Tensor& logits_shard, const Tensor& targets) const;
  std::string type_name() const override { return "TensorParallelGPT"; }
  // nn::GPT(config).state_dict()'s names and shapes, gathered from every rank (a collective).
  nn::StateDict full_state_dict() const override;
  void load_full_state_dict(const nn::StateDict& full) override;
  // Shards: the embedding's vocabulary rows, the attention's q/k/v rows and output columns, the
  // MLP's hidden rows and columns. Replicated: LayerNorms, position embeddings, the row-parallel
  // layers' biases. The parameters come in nn::GPT's order, so an optimizer's state indices
  // mean the same parameters under both.
  bool is_shard(const Tensor& p) const override;
  Tensor gather_shards(const Tensor& p, const Tensor& local) const override;
  Tensor take_shard(const Tensor& p, const Tensor& full) const override;
  ProcessGroup& tensor_group() const override { return *group_; }

  nn::GPTConfig config;
  int64_t padded_vocab;  // config.vocab_size rounded up to a multiple of the group's size

 private:
  enum class Split;
  Split split_of(const Tensor& p) const;
  struct Impl;
  std::shared_ptr<Impl> impl_;
  std::shared_ptr<ProcessGroup> group_;
};

}  // namespace gradus::dist
