// Fully sharded data parallelism (ZeRO-2/3, like PyTorch's fully_shard): the model's parameters
// are cut into units (by default each block of its ModuleLists and Sequentials; the parameters of
// no unit form the root unit), each unit's parameters, gradients and optimizer state are sharded
// over the data ranks by a dist::ZeroRedundancyOptimizer of stage 2 or 3, and the module hooks
// installed here move each unit through a step:
//
//   forward:  the unit's pre-hook waits for its all-gather (stage 3) and starts the next unit's
//             (prefetch); its forward hook frees the whole parameters again (stage 3,
//             reshard_after_forward; not the forward's last unit, whose backward comes next) and
//             hooks the unit's output gradient.
//   backward: the output's gradient hook gathers the unit again before its backward runs
//             (prefetching the unit before it) and gives its parameters a flat gradient; once
//             every parameter of the unit has its gradient (post-accumulate hooks), the flat
//             gradient is reduce-scattered (overlapping the backward of the units before it) and
//             the whole parameters are freed. The optimizer's step waits for the reductions.
//
// The root unit is gathered for the whole forward and backward (it holds what is used at both
// ends, such as a tied embedding and head). Parameters shared by two units go to the root.
//
//   auto zero = std::make_unique<dist::ZeroRedundancyOptimizer>(params, make, group,
//       dist::ZeroOptions{.stage = 3, .units = units.params});
//   dist::FullyShard fsdp(*model, *zero, units);   // units = dist::plan_shard_units(*model,
//   params)
//
// Reading the parameters outside the model's forward (a checkpoint, an evaluation by hand) needs
// them gathered: gather_all() / release_all(), or train::Strategy::full_parameters().
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_set>
#include <vector>

#include "gradus/dist/zero.h"
#include "gradus/nn/module.h"

namespace gradus::dist {

// The units of a model's parameters: unit 0 is the root (the parameters of no other unit, and
// those two units share), unit k > 0 is modules[k - 1]'s.
struct ShardUnits {
  std::vector<nn::Module*> modules;
  std::vector<std::vector<size_t>> params;  // indices into the parameter list given
};

// `units` empty: every child with parameters of each ModuleList and Sequential in the model (the
// GPT's and Llama's blocks, a Sequential's layers), outermost first, not looking inside a unit.
ShardUnits plan_shard_units(nn::Module& model, const std::vector<Tensor>& params,
                            std::vector<nn::Module*> units = {});

struct FullyShardOptions {
  bool reshard_after_forward = true;  // free a unit's whole parameters after its forward (stage 3)
  bool prefetch = true;               // start the next unit's all-gather before it is needed
};

class FullyShard {
 public:
  // `sharded` (stage 2 or 3) was built over the same parameter list with ZeroOptions::units =
  // units.params; both must outlive this object, which removes its hooks when destroyed.
  FullyShard(nn::Module& model, ZeroRedundancyOptimizer& sharded, ShardUnits units,
             FullyShardOptions options = {});
  ~FullyShard();
  FullyShard(const FullyShard&) = delete;
  FullyShard& operator=(const FullyShard&) = delete;

  // Every unit's whole parameters, exactly (collective; never rounded to ZeroOptions::
  // gather_dtype); release_all(true) first makes the shards take what was written into them
  // meanwhile (a checkpoint's load).
  void gather_all();
  void release_all(bool adopt_writes);
  // One unit at a time (unit 0 is the root): its parameters, and the same as above.
  size_t num_units() const { return units_.params.size(); }
  std::vector<Tensor> unit_parameters(size_t unit) const;
  void gather_unit(size_t unit);
  void release_unit(size_t unit, bool adopt_writes);

 private:
  void before_unit(size_t unit);
  void after_unit(size_t unit, const Tensor& output);
  void before_unit_backward(size_t unit);
  void on_gradient(size_t unit, const TensorImpl* param);
  void after_backward();
  void prefetch(size_t unit);

  nn::Module& model_;
  ZeroRedundancyOptimizer& sharded_;
  ShardUnits units_;
  FullyShardOptions options_;
  std::vector<nn::HookHandle> hooks_;
  // The parameters' post-accumulate and the outputs' gradient hooks cannot be removed: they hold
  // this and do nothing once it expires.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // The units in the order the last complete forward ran them, and the one running now.
  std::vector<size_t> order_, recording_;
  bool in_backward_ = false;
  std::vector<size_t> trainable_;  // per unit: how many parameters get a gradient
  std::vector<std::unordered_set<const TensorImpl*>> arrived_;  // per unit, this backward
};

}  // namespace gradus::dist
