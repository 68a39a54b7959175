// Reverse-mode automatic differentiation: grad mode, backward, grad.
#pragma once

#include <functional>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus {

bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// Anomaly mode: every op checks its outputs, and backward checks every gradient, for NaN/Inf;
// the first one found raises AutogradError naming the op and where it was created (a call stack
// captured when the op ran). Slow: for debugging only. `gradus train --detect-anomaly` sets it.
void set_detect_anomaly(bool enabled);
bool is_anomaly_enabled();

class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool enabled = true) : previous_(is_anomaly_enabled()) {
    set_detect_anomaly(enabled);
  }
  ~DetectAnomalyGuard() { set_detect_anomaly(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// Disables graph recording in its scope (inference, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// Accumulates d(sum of outputs * grad_outputs)/d(leaf) into every reachable leaf's .grad.
// grad_outputs may be empty when every output is a scalar (then 1 is used).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false);

// Returns the gradients w.r.t. `inputs` without touching any .grad. An input the outputs do not
// depend on gives an error unless allow_unused (then an undefined Tensor).
namespace autograd {
// Runs fn once the backward pass in progress on this thread has finished (every gradient
// accumulated, every hook run; for a pass nested inside a backward function, such as activation
// checkpointing's recomputation, the outermost one), before backward() returns; callbacks run in
// the order queued and
// an exception from one propagates out of backward(). Throws AutogradError outside a backward
// pass. DistributedDataParallel waits for its last gradient buckets this way.
void queue_callback(std::function<void()> fn);
}  // namespace autograd

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false);

// Activation checkpointing: fn(inputs) runs without keeping its intermediate activations; only
// the inputs are kept, and backward runs fn again (with grad mode on and the random state it had
// in forward, so dropout draws the same masks) and backpropagates through the recomputation.
// Memory for fn's activations is traded for one more forward of fn. `params` are the parameters
// fn uses (a module's parameters()): their gradients accumulate as without checkpointing, and
// they make the segment part of the graph even when no input requires grad. Gradients equal the
// plain run's bit for bit on the CPU. Under no_grad it is just fn(inputs). Nested checkpoints
// work. Throws AutogradError at backward if the recomputed output does not require grad.
Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                  const std::vector<Tensor>& inputs, const std::vector<Tensor>& params = {});
// True while a checkpointed segment is being recomputed in backward. Code with side effects
// beyond its outputs skips them then, so they happen once per forward (BatchNorm's running
// statistics and batch counter do; so should a user module that counts or caches).
bool in_checkpoint_recompute();

}  // namespace gradus
