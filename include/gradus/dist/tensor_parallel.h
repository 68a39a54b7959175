// Tensor parallelism (Megatron-style): layers whose weights are split across the ranks of a
// group, built on differentiable collectives.
//
//   // An MLP block whose hidden layer is split over the ranks: one all-reduce forward, one back.
//   auto up = std::make_shared<dist::ColumnParallelLinear>(512, 2048, true, /*gather=*/false);
//   auto down = std::make_shared<dist::RowParallelLinear>(2048, 512, true, /*parallel_in=*/true);
//   Tensor y = (*down)(gelu((*up)(x)));   // x and y: the full activations, the same on every rank
//
// Weights are initialised by drawing the full (unsplit) weight exactly as nn::Linear would and
// keeping this rank's slice, so a tensor-parallel model built after manual_seed(s) computes what
// the one-device model built after manual_seed(s) does. full_state_dict() gathers the full
// weights (PyTorch/nn::Linear names and shapes); load_full_state_dict() takes this rank's slices.
#pragma once

#include <memory>
#include <vector>

#include "gradus/dist/process_group.h"
#include "gradus/nn/module.h"

namespace gradus::dist {

// The four mappings between replicated and split activations (each the other's transpose):
//   copy_to_parallel_region      forward identity,             backward all-reduce (sum)
//   reduce_from_parallel_region  forward all-reduce (sum),     backward identity
//   gather_from_parallel_region  forward all-gather (last dim), backward this rank's slice
//   scatter_to_parallel_region   forward this rank's slice of the last dim, backward all-gather
// group: nullptr for default_group(). The last dim must divide evenly for scatter.
Tensor copy_to_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group = nullptr);
Tensor reduce_from_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group = nullptr);
Tensor gather_from_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group = nullptr);
Tensor scatter_to_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group = nullptr);

// y = x W^T + b with W's output features split: this rank holds rows
// [rank * out/size, (rank+1) * out/size) of W and b. gather_output: all-gather y (every rank gets
// the full [.., out]); otherwise y is this rank's [.., out/size] slice (feed a RowParallelLinear).
class ColumnParallelLinear : public nn::Module {
 public:
  ColumnParallelLinear(int64_t in_features, int64_t out_features, bool bias = true,
                       bool gather_output = true, std::shared_ptr<ProcessGroup> group = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ColumnParallelLinear"; }
  std::string extra_repr() const override;
  // {"weight": [out, in], "bias": [out]}, gathered from every rank (a collective).
  nn::StateDict full_state_dict() const;
  void load_full_state_dict(const nn::StateDict& full);

  int64_t in_features, out_features, local_out;
  bool gather_output;
  Tensor weight, bias;  // this rank's slices

 private:
  std::shared_ptr<ProcessGroup> group_;
};

// y = x W^T + b with W's input features split: this rank holds columns
// [rank * in/size, (rank+1) * in/size) of W; the partial products are all-reduced, then the full
// bias (kept on every rank) is added. input_is_parallel: x is already this rank's slice of the
// features (a ColumnParallelLinear's un-gathered output); otherwise x is full and is sliced here.
class RowParallelLinear : public nn::Module {
 public:
  RowParallelLinear(int64_t in_features, int64_t out_features, bool bias = true,
                    bool input_is_parallel = false, std::shared_ptr<ProcessGroup> group = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "RowParallelLinear"; }
  std::string extra_repr() const override;
  nn::StateDict full_state_dict() const;
  void load_full_state_dict(const nn::StateDict& full);

  int64_t in_features, out_features, local_in;
  bool input_is_parallel;
  Tensor weight, bias;  // weight: this rank's columns; bias: the full bias

 private:
  std::shared_ptr<ProcessGroup> group_;
};

// Embedding with the vocabulary split: this rank holds rows [rank * V/size, (rank+1) * V/size).
// An id outside this rank's rows contributes zeros; the partial lookups are all-reduced, so every
// rank gets the full [.., dim] embeddings. Equal to nn::Embedding built from the same seed.
class VocabParallelEmbedding : public nn::Module {
 public:
  VocabParallelEmbedding(int64_t num_embeddings, int64_t embedding_dim,
                         std::shared_ptr<ProcessGroup> group = nullptr);
  Tensor forward(const Tensor& ids) override;
  std::string type_name() const override { return "VocabParallelEmbedding"; }
  nn::StateDict full_state_dict() const;  // {"weight": [V, dim]} (a collective)
  std::shared_ptr<ProcessGroup> group_ptr() const { return group_; }

  int64_t num_embeddings, embedding_dim, local_rows, first_row;
  Tensor weight;  // this rank's rows

 private:
  std::shared_ptr<ProcessGroup> group_;
};

// The output head tied to a VocabParallelEmbedding (they share its rows): x [.., dim] (the full
// activations) -> this rank's logits [.., V/size] = x W_local^T, the classes the embedding's rows
// hold; the input gradient is all-reduced (a ColumnParallelLinear without bias, not gathered).
// Feed its logits to vocab_parallel_cross_entropy.
class VocabParallelHead : public nn::Module {
 public:
  explicit VocabParallelHead(const VocabParallelEmbedding& embedding);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "VocabParallelHead"; }
  Tensor weight;  // the embedding's rows (the same tensor)

 private:
  std::shared_ptr<ProcessGroup> group_;
};

// Mean cross-entropy over logits whose class dimension is split over the group the way
// VocabParallelEmbedding splits rows (e.g. a ColumnParallelLinear's un-gathered output): rank r
// holds classes [r * C/size, (r+1) * C/size) of logits [N, C/size]; target [N] holds global
// class ids. The [N, C] logits are never gathered: three all-reduces of N values each (max, sum
// of exponentials, target logit). Equal to cross_entropy on the gathered logits.
Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& target,
                                    std::shared_ptr<ProcessGroup> group = nullptr);

// in -> hidden -> activation -> out with the hidden layer split over the group: a column-parallel
// Linear (not gathered), the activation on this rank's slice, a row-parallel Linear. One
// all-reduce forward and one backward. Equal to nn::MLP({in, hidden, out}, activation) built from
// the same seed; state_dict names "0.weight", "0.bias", "2.weight", "2.bias" like it.
class TensorParallelMLP : public nn::Module {
 public:
  TensorParallelMLP(int64_t in_features, int64_t hidden_features, int64_t out_features,
                    const std::string& activation = "relu",
                    std::shared_ptr<ProcessGroup> group = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "TensorParallelMLP"; }
  // The one-device MLP's state dict, gathered (a collective).
  nn::StateDict full_state_dict() const;

  std::shared_ptr<ColumnParallelLinear> up;
  std::shared_ptr<RowParallelLinear> down;
  std::string activation;
};

// A model whose parameters are split over the ranks of a tensor-parallel group, as the training
// layer sees it: which parameters are shards (gradient clipping counts each value once), and the
// mapping between a parameter's shard and one process's tensor (checkpoints hold the one-process
// model and optimizer state, so they resume under any layout). dist::TensorParallelGPT is one.
class TensorParallelModule {
 public:
  virtual ~TensorParallelModule() = default;
  virtual ProcessGroup& tensor_group() const = 0;
  // Whether parameter p is this rank's shard of a split weight (false: replicated on every rank).
  virtual bool is_shard(const Tensor& p) const = 0;
  // The one-process tensor of which `local` (shaped like parameter p's shard: p itself, or an
  // optimizer state of it) is this rank's part; `local` itself for a replicated p. A collective
  // over the tensor group.
  virtual Tensor gather_shards(const Tensor& p, const Tensor& local) const = 0;
  // This rank's part of `full` (a one-process tensor of parameter p's shape).
  virtual Tensor take_shard(const Tensor& p, const Tensor& full) const = 0;
  // The one-process model's state dict (names and shapes), gathered; and the inverse.
  virtual nn::StateDict full_state_dict() const = 0;
  virtual void load_full_state_dict(const nn::StateDict& full) = 0;
};

// A TensorParallelModule for any model whose split layers are ColumnParallelLinear,
// RowParallelLinear and VocabParallelEmbedding (e.g. an nn::Sequential with a Megatron MLP
// inside): the column layers' weights and biases and the embeddings' weights are split by rows,
// the row layers' weights by columns (their bias is replicated); or for a part of a model another
// TensorParallelModule describes. Parameters are found by identity, so `model` may be the whole
// model or a pipeline stage of it; the model must outlive this view.
class TensorParallelLayers final : public TensorParallelModule {
 public:
  TensorParallelLayers(std::shared_ptr<nn::Module> model, std::shared_ptr<ProcessGroup> group);
  // A part of a split model (a pipeline stage of a dist::TensorParallelGPT), which says for each
  // of its parameters how it is split (`whole`, which must outlive this view).
  TensorParallelLayers(std::shared_ptr<nn::Module> part, const TensorParallelModule& whole);
  ProcessGroup& tensor_group() const override;
  bool is_shard(const Tensor& p) const override;
  Tensor gather_shards(const Tensor& p, const Tensor& local) const override;
  Tensor take_shard(const Tensor& p, const Tensor& full) const override;
  nn::StateDict full_state_dict() const override;
  void load_full_state_dict(const nn::StateDict& full) override;

 private:
  // The dimension a parameter is split along (0: rows, 1: columns), -1 for a replicated one.
  int split_dim(const Tensor& p) const;
  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<ProcessGroup> group_;
  const TensorParallelModule* whole_ = nullptr;  // the part's splits, when it is a part
};

// How one data replica's model is spread over ranks, as its gradient norm sees it: tensor
// parallelism splits some weights over a tensor group, pipeline stages hold disjoint layers.
struct ModelParallel {
  const TensorParallelModule* tensor = nullptr;  // the split weights (nullptr: none)
  ProcessGroup* stages = nullptr;                // the pipeline group (nullptr: one stage)
  // Whether any rank but this one holds part of the replica's model.
  bool split() const;
};

// optim::clip_grad_norm for a model that tensor or pipeline parallelism may split: the 2-norm of
// the whole replica's gradient (the shards' squares summed over the tensor group, the replicated
// parameters' counted once, then the stages' sums added over the pipeline group: collectives that
// read the norm on the host) and every gradient of params scaled by min(1, max_norm / (norm +
// 1e-6)), as one process clips; without a split, optim::clip_grad_norm itself (nothing read back).
void clip_grad_norm_model_parallel(const std::vector<Tensor>& params, double max_norm,
                                   const ModelParallel& split);

}  // namespace gradus::dist
