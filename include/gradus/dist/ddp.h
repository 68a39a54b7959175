// DistributedDataParallel: data-parallel training of any module. Every rank holds a replica; after
// each backward pass the gradients are averaged over the ranks, so every replica takes the same
// optimizer step.
//
//   auto ddp = std::make_shared<dist::DistributedDataParallel>(model);
//   optim::SGD opt(model->parameters(), {...});  // the inner module's parameters
//   Tensor loss = cross_entropy((*ddp)(x), y);    // x: this rank's share of the batch
//   loss.backward();                              // gradients averaged when it returns
//   opt.step();
//
// How (PyTorch's Reducer design):
// - Construction broadcasts rank 0's parameters and buffers, and checks that every rank has the
//   same parameter count and sizes.
// - Gradients live in flat buckets (per dtype and device; in reverse registration order, which is
//   roughly the order backward produces them; a small first bucket so communication starts
//   early). Each parameter's .grad is a view into its bucket, so backward accumulates straight
//   into the buffer that is communicated: nothing is copied.
// - A post-accumulate hook per parameter counts the bucket down; a complete bucket's all-reduce
//   (avg) starts at once on the communication thread while backward goes on. Buckets start in
//   the same order on every rank (a ready bucket waits for its predecessors). When backward ends,
//   a callback waits for what is still in flight, so backward() returns averaged gradients.
// - Buffers (BatchNorm running statistics) are broadcast from rank 0 before every forward in
//   training mode, as PyTorch does (broadcast_buffers); SyncBatchNorm is not provided.
// - A parameter that got no gradient in a backward pass is an error naming it, unless
//   find_unused_parameters: then its gradient counts as zero on that rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gradus/dist/process_group.h"
#include "gradus/nn/module.h"

namespace gradus::dist {

struct DDPOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  // false: every bucket is all-reduced after backward (no overlap; for measuring what overlap
  // gains).
  bool overlap = true;
  std::shared_ptr<ProcessGroup> group = nullptr;  // nullptr: default_group()
};

struct DDPStats {
  int64_t backward_passes = 0;  // synchronised ones
  int64_t buckets_reduced = 0;
  double wait_seconds = 0;  // host time blocked at the end of backward on communication
  double last_wait_seconds = 0;
};

class Reducer;

class DistributedDataParallel : public nn::Module {
 public:
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options = {});
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  nn::Module& module() { return *module_; }
  const std::shared_ptr<nn::Module>& module_ptr() const { return module_; }

  // Within its scope, backward passes accumulate gradients locally without communicating
  // (gradient accumulation); the first backward after it averages everything accumulated.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // The parameter names of each bucket, in launch order (for tests and logs).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  DDPStats stats() const;
  ProcessGroup& group() const { return *group_; }

  std::string type_name() const override { return "DistributedDataParallel"; }

 private:
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  std::shared_ptr<Reducer> reducer_;
  bool sync_ = true;
};

}  // namespace gradus::dist
