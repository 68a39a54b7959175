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
// Stages 2 and 3 (ZeroOptions::stage) shard more, per unit (a group of parameters gathered and
// reduced together: a transformer block; dist::FullyShard drives them from the module's hooks):
//   2: the gradients too. Each unit's flat gradient exists only during its backward: it is
//      reduce-scattered as soon as the unit's parameters have their gradients (reduce_gradients)
//      and freed once the reduction lands in the shard (finish_gradients, at the latest in step).
//   3: and the parameters. Each unit's whole parameters exist only between gather() and release();
//      between steps a rank holds its shards of parameters, gradients and optimizer state. (In a
//      world of one the shard is the whole model: the parameters stay whole.)
//
// Without data parallelism (a world of one) it is exactly the wrapped optimizer on one shard.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradus/dist/process_group.h"
#include "gradus/dist/tensor_parallel.h"
#include "gradus/optim/optimizer.h"

namespace gradus::dist {

using LocalOptimizerFactory =
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> shard)>;

struct ZeroOptions {
  int stage = 1;  // 1: optimizer state sharded; 2: and gradients; 3: and parameters
  // Indices into the parameter list, per unit (every parameter in exactly one; a unit may be
  // empty). Empty: one unit of every parameter.
  std::vector<std::vector<size_t>> units = {};
  // Mixed precision (FSDP2's MixedPrecisionPolicy, for the communication): the dtype the shards
  // travel in when a unit is gathered for compute (stage 3; bf16 or f16 halves the all-gather's
  // bytes; the whole parameters are those values widened back, so they are the master values
  // rounded once, which is what autocast's matrix products read anyway), and the dtype gradients
  // are reduce-scattered in (stages 2 and 3; the gradient shard and the master shards stay in the
  // parameters' dtype). Unset: the parameters' dtype. Gathers for checkpoints and loads
  // (wait_gathered(unit, exact)) are always exact. A world of one communicates nothing, so
  // neither applies there.
  std::optional<DType> gather_dtype = std::nullopt;
  std::optional<DType> reduce_dtype = std::nullopt;
};

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  ZeroRedundancyOptimizer(std::vector<Tensor> params, const LocalOptimizerFactory& make_local,
                          std::shared_ptr<ProcessGroup> group = nullptr, ZeroOptions options = {});
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
  // Stage 1: zeroes the flat gradients in place (the parameters' .grad stay views of them);
  // stages 2 and 3: zeroes the gradient shards and drops any flat gradient left.
  void zero_grad(bool set_to_none = true) override;

  // ---- per unit (stages 2 and 3; collectives, called in the same order on every rank) ----
  int stage() const { return options_.stage; }
  size_t num_units() const { return units_.size(); }
  // Stage 3: gives the unit's whole parameters memory again and starts their all-gather from the
  // shards (a no-op when gathered or in flight; nothing to do below stage 3).
  // exact: in the parameters' own dtype whatever gather_dtype says (what a checkpoint reads, what
  // a load writes into; a unit gathered rounded is gathered again).
  void gather(size_t unit, bool exact = false);
  // gather() and waits for it: the unit's parameters hold their whole values.
  void wait_gathered(size_t unit, bool exact = false);
  // Stage 3: frees the unit's whole parameters (waiting for a gather in flight first).
  void release(size_t unit);
  // Stage 3: the shards take the gathered unit's whole values (what a load wrote into them).
  void adopt_gathered(size_t unit);
  // A zeroed flat gradient for the unit, the parameters' .grad views of it (kept when present):
  // backward then accumulates straight into what is reduce-scattered.
  void prepare_gradients(size_t unit);
  // Starts the reduce-scatter (avg) of the unit's flat gradient toward its shard; a parameter
  // whose .grad is not a view of it (none was prepared) is copied in first.
  void reduce_gradients(size_t unit);
  // Waits for every reduction started, adds each into the gradient shard, frees the flat
  // gradients and the parameters' .grad; reduces first whatever has a gradient and no reduction
  // yet. step() calls it.
  void finish_gradients();
  // Lands the reductions in flight only (before another backward accumulates: dist::FullyShard
  // calls it when a backward begins).
  void wait_reductions();
  // How long the caller waited for communication that was not done yet (the gathers a unit
  // needed now; the reductions step() needed): with the communication's own time, what the
  // overlap hid.
  struct Stats {
    double gather_wait_seconds = 0;
    double reduce_wait_seconds = 0;
  };
  const Stats& stats() const { return stats_; }
  const char* type_name() const override;
  double group_lr(size_t group) const override;
  void set_group_lr(size_t group, double lr) override;

  // This rank's shard: [begin, end) of flat buffer `buffer` (one per unit and dtype/device).
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
  // This rank's part of state_dict(), without communication (sharded checkpoints): `scalars` is
  // state_dict() without its tensors (every rank has the same), and each slice is the part of
  // parameter i (flattened) that falls in this rank's shards, with its values and the state
  // tensors over the same elements. Together over the ranks the slices cover every element of
  // every parameter once. The tensors are views of the live shards.
  struct OwnedRange {
    size_t param = 0;
    int64_t begin = 0, end = 0;
  };
  struct OwnedSlice : OwnedRange {
    Tensor values;                        // [end - begin]
    std::map<std::string, Tensor> state;  // state name ("exp_avg") -> [end - begin]
  };
  struct ShardedState {
    optim::OptimizerState scalars;
    std::vector<OwnedSlice> slices;
    // What every rank's slices are (this rank's included), by rank: the same on every rank.
    std::vector<std::vector<OwnedRange>> ranges_by_rank;
    // Per parameter (all of them, held here or not): its state tensors' names and dtypes.
    std::vector<std::map<std::string, DType>> state_dtypes;
  };
  ShardedState sharded_state() const;
  ProcessGroup& group() const { return *group_; }

 protected:
  std::map<std::string, double> group_options(size_t group) const override;
  void set_group_options(size_t group, const std::map<std::string, double>& values) override;

 private:
  struct Buffer;
  void attach_gradients();
  void clip_shards();
  void collect_gradients(Buffer& b);
  void land_reduction(Buffer& b);
  void release_buffer(Buffer& b);
  ZeroOptions options_;
  bool shards_parameters_ = false;  // stage 3 over more than one rank
  Stats stats_;
  std::vector<std::vector<Buffer*>> units_;  // the buffers of each unit
  double max_grad_norm_ = 0;
  ModelParallel model_parallel_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::unique_ptr<optim::Optimizer> local_;
};

}  // namespace gradus::dist
