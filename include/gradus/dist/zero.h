// ZeRO stage 1: the optimizer state is sharded over the ranks.
//
//   dist::ZeroRedundancyOptimizer opt(model->parameters(), [](std::vector<Tensor> shard) {
//     return std::make_unique<optim::Adam>(shard, optim::AdamOptions{.lr = 1e-3});
//   });
//   opt.zero_grad(); loss.backward(); opt.step();
//
// The parameters of each dtype/device are packed into one flat buffer (the parameters become
// views of it; build this after model.to(device, dtype)), padded to a multiple of the world size
// and cut into size() equal shards. step() reduce-scatters the flat gradients (avg), so each rank
// gets the averaged gradient of its shard only; the wrapped optimizer (SGD/Adam/AdamW, the fused
// kernels) updates that shard; an all-gather gives every rank the whole updated parameters.
// Optimizer state per rank is 1/size of the unsharded one. The gradients are views of the flat
// gradient buffer (zero_grad zeroes it and re-attaches them), so backward writes straight into
// what is communicated.
//
// Without data parallelism (a world of one) it is exactly the wrapped optimizer on one shard.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gradus/dist/process_group.h"
#include "gradus/dist/tensor_parallel.h"
#include "gradus/optim/optimizer.h"

namespace gradus::dist {

using LocalOptimizerFactory =
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> shard)>;

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  ZeroRedundancyOptimizer(std::vector<Tensor> params, const LocalOptimizerFactory& make_local,
                          std::shared_ptr<ProcessGroup> group = nullptr);
  ~ZeroRedundancyOptimizer() override;

  void step() override;
  // Clips the averaged gradient to a global 2-norm (0: off) in each step, between the
  // reduce-scatter and the update, as optim::clip_grad_norm on one process would.
  void set_max_grad_norm(double max_norm) { max_grad_norm_ = max_norm; }
  // With tensor or pipeline parallelism inside each data replica: the clipping norm is the whole
  // model's (the shards' squares summed over the tensor group too, the replicated parameters'
  // counted once, the stages' sums added over the pipeline group). What split points to must
  // outlive the optimizer.
  void set_model_parallel(const ModelParallel& split);
  void zero_grad(bool set_to_none = true) override;  // always zeroes the flat gradients in place
  const char* type_name() const override;
  double group_lr(size_t group) const override;
  void set_group_lr(size_t group, double lr) override;

  // This rank's shard: [begin, end) of flat buffer `buffer` (one per dtype/device).
  struct Shard {
    int64_t begin = 0, end = 0, padded_numel = 0, numel = 0;
  };
  size_t num_buffers() const;
  Shard shard(size_t buffer) const;
  // The local optimizer's state (shard-shaped tensors); state_bytes() counts it.
  const optim::Optimizer& local() const { return *local_; }
  optim::Optimizer& local() { return *local_; }
  uint64_t state_bytes() const override;

  // Checkpoints: the state an unsharded optimizer of the same type over the same parameters
  // would have (collective: every rank must call it; the result is complete on every rank), and
  // back (every rank takes its shard of it). A checkpoint written at one world size therefore
  // resumes at any other.
  optim::OptimizerState state_dict() const override;
  void load_state_dict(const optim::OptimizerState& state) override;
  ProcessGroup& group() const { return *group_; }

 protected:
  std::map<std::string, double> group_options(size_t group) const override;
  void set_group_options(size_t group, const std::map<std::string, double>& values) override;

 private:
  struct Buffer;
  void attach_gradients();
  void clip_shards();
  double max_grad_norm_ = 0;
  ModelParallel model_parallel_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::unique_ptr<optim::Optimizer> local_;
};

}  // namespace gradus::dist
