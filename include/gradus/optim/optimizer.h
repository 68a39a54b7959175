// Optimizer base: parameter groups with per-group hyperparameters, per-parameter state tensors,
// zero_grad, learning-rate access for schedulers and a flat, serialisable state_dict.
//
// step() implementations run under NoGradGuard, skip parameters whose grad is undefined, group
// the remaining ones by (device, dtype) and hand each group to the backend's fused multi-tensor
// kernel (sgd_step / adam_step), so one step is a handful of kernel launches.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::optim {

// A set of parameters sharing hyperparameters.
template <typename Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;
};

// Per-parameter optimizer state: named tensors (momentum_buffer, exp_avg, ...) and a step count.
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> tensors;
};

// What state_dict() returns. Parameters are numbered in group order (0, 1, ... across groups,
// like PyTorch's optimizer state_dict):
//   tensors["state.<i>.<name>"]            e.g. "state.3.exp_avg"
//   scalars["state.<i>.step"]              per-parameter step counts (only for parameters that
//                                          have state)
//   scalars["param_groups.<g>.<option>"]   e.g. "param_groups.0.lr", "param_groups.0.momentum"
//   scalars["param_groups.<g>.num_params"]
// Every value is a tensor or a double, so the struct maps directly to safetensors + JSON.
struct OptimizerState {
  std::string type;  // "SGD", "Adam", "AdamW"
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;
};

// A state key of a parameter: "state.12.exp_avg" -> index 12 (the parameter's position in
// all_params()), name "exp_avg"; false for any other key.
bool parse_state_key(const std::string& key, size_t& index, std::string& name);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;
  virtual const char* type_name() const = 0;

  // set_to_none (PyTorch's default) drops the gradients; otherwise they are zeroed in place.
  virtual void zero_grad(bool set_to_none = true);

  size_t num_param_groups() const { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const;
  std::vector<Tensor> all_params() const;

  // Learning rate of group 0 / of every group (schedulers set them through these).
  double lr() const { return group_lr(0); }
  void set_lr(double lr);
  virtual double group_lr(size_t group) const = 0;
  virtual void set_group_lr(size_t group, double lr) = 0;

  // The state of parameter `index` of `group` (empty until its first step).
  const ParamState& state(size_t group, size_t index) const;

  // Capturable mode, for steps replayed by a CUDA graph (cuda::Graph, `gradus train
  // --cuda-graph`). A graph replays its kernels with the arguments they had at capture, so a
  // learning rate or step count passed from the host would stay frozen. In this mode each group
  // keeps {lr, step} in a small float64 tensor on its parameters' device, which the step's kernels
  // read: set_lr / set_group_lr / a scheduler write it (call them outside the captured region),
  // and the step advances the count on the device. The step count then is per group (a parameter
  // without a gradient at some step counts it anyway), and state().step is not updated;
  // state_dict() reads the counts from the device (one wait). Turning it on needs each group on
  // one device, with its parameters at one step count; turning it off writes the counts back.
  // Throws ValueError naming the group otherwise.
  void set_capturable(bool on);
  bool capturable() const { return !device_scalars_.empty(); }

  // Bytes of optimizer state this process holds (a sharded optimizer: its shard's).
  virtual uint64_t state_bytes() const;

  // The state an optimizer of this type over these parameters has, whatever spreads it: a
  // sharded optimizer (dist::ZeroRedundancyOptimizer) gathers it, collectively (every rank of its
  // group calls it), so checkpoints never ask which optimizer they hold.
  virtual OptimizerState state_dict() const;
  // Restores hyperparameters, step counts and state tensors (copied to each parameter's device
  // and dtype; a sharded optimizer keeps its shard). Throws ValueError when the type, group count,
  // parameter counts or keys do not match this optimizer, ShapeError when a state tensor's shape
  // differs from its parameter's. Nothing changes when it throws.
  virtual void load_state_dict(const OptimizerState& state);

 protected:
  Optimizer() = default;
  // Validates the parameters (defined, floating, leaves, no duplicates anywhere) and adds a group.
  void add_group(std::vector<Tensor> params);
  // Hyperparameters of a group as named doubles, and back (validated by the subclass).
  virtual std::map<std::string, double> group_options(size_t group) const = 0;
  virtual void set_group_options(size_t group, const std::map<std::string, double>& values) = 0;

  ParamState& mutable_state(size_t group, size_t index) { return state_[group][index]; }
  // Returns the state tensor `name` of a parameter, creating it (zeros like the parameter) when
  // absent and moving it to the parameter's device/dtype when a model.to(...) moved the param.
  Tensor& state_tensor(size_t group, size_t index, const std::string& name,
                       bool* created = nullptr);

  // Capturable mode: writes a group's learning rate into its device scalars (the subclasses'
  // set_group_lr and set_group_options call it), and advances the group's step count on the
  // device, returning the {lr, step} pointer the kernels read.
  void write_device_lr(size_t group, double lr);
  const double* advance_device_step(size_t group);

  std::vector<std::vector<Tensor>> groups_;
  std::vector<std::vector<ParamState>> state_;

 private:
  // Each group's step count, read from the device (capturable mode).
  std::vector<int64_t> device_steps() const;

  std::vector<Tensor>
      device_scalars_;  // per group {lr, step, 1} (float64); empty unless capturable
};

}  // namespace gradus::optim
