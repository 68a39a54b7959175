// The autograd graph: nodes hold a backward rule, saved tensors and edges to the nodes that
// produced their inputs. Internal to gradus::autograd (ops include it; users never do).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::autograd {

class Node;
using TensorList = std::vector<Tensor>;

struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// Shape/dtype/device of one node output, so the engine can materialise a zero gradient for an
// output nobody used.
struct OutputMeta {
  Shape shape;
  DType dtype;
  Device device;
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grads: one per output (undefined ones already replaced by zeros). Returns one gradient per
  // next edge (undefined where the input needs none).
  virtual TensorList apply(TensorList&& grads) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors after a backward pass without retain_graph.
  virtual void release() {}

  std::vector<Edge> next_edges;
  std::vector<OutputMeta> outputs;
  // Hooks on the gradient of output i (Tensor::register_hook on a non-leaf).
  std::vector<std::pair<uint32_t, GradHook>> pre_hooks;
  uint64_t sequence_nr;        // creation order: later nodes run first when several are ready
  std::string creation_trace;  // call stack at creation, recorded only in anomaly mode
};

// Anomaly mode helpers (src/autograd/anomaly.cpp).
std::string capture_call_stack();
// Throws AutogradError if any floating tensor holds NaN or Inf. `what` says where it was found.
void check_finite(const TensorList& tensors, const std::string& what, const std::string& trace);

// A saved input or output of an op. Stores a history-free alias plus the storage version at save
// time; get() throws if the tensor was modified in place since.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  Tensor get() const;
  bool defined() const { return data_.defined(); }

 private:
  Tensor data_;
  uint64_t version_ = 0;
};

// needs[i]: whether input i of the op needs a gradient.
using NeedsGrad = std::vector<bool>;
using BackwardFn = std::function<TensorList(const TensorList& grads, const NeedsGrad& needs)>;

// The node of nearly every op: its backward rule is a lambda written with ops, capturing what it
// saved (SavedTensor) by value.
class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn, NeedsGrad needs)
      : name_(name), fn_(std::move(fn)), needs_(std::move(needs)) {}
  TensorList apply(TensorList&& grads) override;
  std::string name() const override { return name_; }
  void release() override { fn_ = nullptr; }

 private:
  const char* name_;
  BackwardFn fn_;
  NeedsGrad needs_;
};

// Sink for a leaf: adds the incoming gradient to leaf.grad, then runs post-accumulate hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {}
  TensorList apply(TensorList&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  std::shared_ptr<TensorImpl> leaf() const { return leaf_.lock(); }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

// The edge through which gradient flows into `t` (its grad_fn, or its leaf accumulator);
// an invalid edge if t does not require grad.
Edge gradient_edge(const Tensor& t);

// True when grad mode is on and some input requires grad.
bool any_requires_grad(const TensorList& inputs);

// Records `fn` as the backward of an op with these inputs and outputs, when any input requires
// grad and grad mode is on. Returns the outputs (now carrying history).
Tensor record(const char* name, Tensor output, const TensorList& inputs, BackwardFn fn);
TensorList record_multi(const char* name, TensorList outputs, const TensorList& inputs,
                        BackwardFn fn);

}  // namespace gradus::autograd
