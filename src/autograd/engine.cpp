// The backward engine: runs the graph reachable from the outputs in dependency order (later nodes
// first among the ready ones), summing the gradients that reach each node input.
#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/node.h"
#include "gradus/autograd.h"
#include "gradus/core/profiling.h"
#include "gradus/ops.h"
#include "ops/autocast.h"

namespace gradus {
namespace {
thread_local bool t_grad_enabled = true;
}

bool is_grad_enabled() {
  return t_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  t_grad_enabled = enabled;
}

namespace autograd {
namespace {

// The callbacks of the backward pass running on this thread (nullptr outside one).
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

struct NodeState {
  int dependencies = 0;
  TensorList inputs;  // gradient per node output, summed over the edges that reach it
};

void accumulate(Tensor& slot, const Tensor& grad) {
  if (!slot.defined()) {
    slot = grad;
  } else {
    slot = add(slot, grad);
  }
}

// The profiler's name for a node's backward: "<op>_backward" for the ops' nodes (named after
// their op, lower case), the node's own name for the others (AccumulateGrad, hooks).
[[maybe_unused]] std::string backward_event_name(const Node& node) {
  std::string name = node.name();
  if (!name.empty() && name[0] >= 'a' && name[0] <= 'z') name += "_backward";
  return name;
}

struct CompareSequence {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// roots: (edge, gradient) pairs. capture: when non-empty, the engine returns the gradient that
// reaches each of these edges instead of accumulating into any leaf .grad.
TensorList run_backward(const std::vector<std::pair<Edge, Tensor>>& roots, bool keep_graph,
                        const std::vector<Edge>& capture) {
  // Each backward rule runs in the dtypes its forward chose; an enclosing autocast scope must not
  // re-cast them (a checkpointed segment re-enters its forward's autocast state itself).
  ops::AutocastSuspend no_autocast;
  NoGradGuard no_grad;  // backward rules never record (no higher-order graphs)
  // Callbacks belong to the outermost pass: a pass nested inside a backward function (activation
  // checkpointing's recomputation) is part of it, and DDP's end-of-backward wait must run once the
  // whole of backward is done, not when the nested pass ends.
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* const outer_callbacks = t_callbacks;
  const bool outermost = outer_callbacks == nullptr;
  if (outermost) t_callbacks = &callbacks;
  struct RestoreCallbacks {
    std::vector<std::function<void()>>* outer;
    ~RestoreCallbacks() { t_callbacks = outer; }
  } restore{outer_callbacks};
  std::unordered_map<Node*, NodeState> state;
  // Count, for every reachable node, how many edges point at it.
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (const auto& [edge, grad] : roots) {
    if (seen.insert(edge.fn.get()).second) stack.push_back(edge.fn.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      ++state[e.fn.get()].dependencies;
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  std::priority_queue<Node*, std::vector<Node*>, CompareSequence> ready;
  for (const auto& [edge, grad] : roots) {
    NodeState& s = state[edge.fn.get()];
    if (s.inputs.empty()) s.inputs.resize(edge.fn->outputs.size());
    accumulate(s.inputs[edge.input_nr], grad);
  }
  for (const auto& [edge, grad] : roots) {
    NodeState& s = state[edge.fn.get()];
    if (s.dependencies == 0) {
      s.dependencies = -1;  // queued
      ready.push(edge.fn.get());
    }
  }

  const bool capturing = !capture.empty();
  TensorList captured(capture.size());
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    NodeState& s = state[node];
    TensorList grads = std::move(s.inputs);
    grads.resize(node->outputs.size());
    const bool reached =
        std::any_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.defined(); });
    // A leaf that no gradient reached (a checkpointed segment's parameters: the nested pass of the
    // recomputation already accumulated them) is left alone: adding zeros would turn -0.0 into
    // +0.0 and run its hooks twice.
    if (!reached && !capturing && dynamic_cast<AccumulateGrad*>(node) != nullptr) continue;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) {
        const OutputMeta& m = node->outputs[i];
        grads[i] = zeros(m.shape, {m.dtype, m.device});
      }
    }
    for (auto& [output_nr, hook] : node->pre_hooks) {
      Tensor replaced = hook(grads[output_nr]);
      if (replaced.defined()) grads[output_nr] = replaced;
    }
    if (capturing) {
      for (size_t c = 0; c < capture.size(); ++c) {
        if (capture[c].fn.get() == node) accumulate(captured[c], grads[capture[c].input_nr]);
      }
      if (dynamic_cast<AccumulateGrad*>(node) != nullptr) continue;
    }
    TensorList out;
    {
      GRADUS_PROFILE_SCOPE_NAMED(backward, backward_event_name(*node));
      out = node->apply(std::move(grads));
    }
    if (is_anomaly_enabled()) {
      check_finite(out, "the gradient computed by the backward of '" + node->name() + "'",
                   node->creation_trace);
    }
    if (!keep_graph) node->release();
    for (size_t i = 0; i < node->next_edges.size() && i < out.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid() || !out[i].defined()) continue;
      NodeState& next = state[e.fn.get()];
      if (next.inputs.empty()) next.inputs.resize(e.fn->outputs.size());
      accumulate(next.inputs[e.input_nr], out[i]);
    }
    for (const Edge& e : node->next_edges) {
      if (!e.valid()) continue;
      NodeState& next = state[e.fn.get()];
      if (--next.dependencies == 0) ready.push(e.fn.get());
    }
  }
  // Callbacks may queue further callbacks: index, not iterators.
  if (outermost) {
    for (size_t i = 0; i < callbacks.size(); ++i) callbacks[i]();
  }
  return captured;
}

std::vector<std::pair<Edge, Tensor>> make_roots(const TensorList& outputs,
                                                const TensorList& grad_outputs, const char* op) {
  GRADUS_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), ValueError, op,
               ": got ", grad_outputs.size(), " gradients for ", outputs.size(), " outputs");
  std::vector<std::pair<Edge, Tensor>> roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    GRADUS_CHECK(out.defined(), ValueError, op, ": output ", i, " is undefined");
    GRADUS_CHECK(out.requires_grad(), AutogradError, op, ": output ", i,
                 " does not require grad and has no grad_fn (was it computed under no_grad, or "
                 "from tensors without requires_grad?)");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      GRADUS_CHECK(out.numel() == 1, AutogradError, op,
                   ": a gradient can be implicitly created only for scalar outputs, but output ", i,
                   " has shape ", shape_str(out.sizes()));
      g = ones_like(out);
    } else {
      GRADUS_CHECK(g.sizes() == out.sizes(), ShapeError, op, ": gradient shape ",
                   shape_str(g.sizes()), " does not match output shape ", shape_str(out.sizes()));
    }
    roots.emplace_back(gradient_edge(out), g.detach());
  }
  return roots;
}

}  // namespace

void queue_callback(std::function<void()> fn) {
  GRADUS_CHECK(t_callbacks != nullptr, AutogradError,
               "autograd::queue_callback: no backward pass is running on this thread");
  t_callbacks->push_back(std::move(fn));
}

}  // namespace autograd

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              bool retain_graph) {
  GRADUS_PROFILE_SCOPE(backward, "backward");
  autograd::run_backward(autograd::make_roots(outputs, grad_outputs, "backward"), retain_graph, {});
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph,
                         bool allow_unused) {
  GRADUS_PROFILE_SCOPE(backward, "grad");
  std::vector<autograd::Edge> capture;
  for (size_t i = 0; i < inputs.size(); ++i) {
    GRADUS_CHECK(inputs[i].defined() && inputs[i].requires_grad(), AutogradError, "grad: input ", i,
                 " does not require grad");
    capture.push_back(autograd::gradient_edge(inputs[i]));
  }
  autograd::TensorList result = autograd::run_backward(
      autograd::make_roots(outputs, grad_outputs, "grad"), retain_graph, capture);
  for (size_t i = 0; i < result.size(); ++i) {
    GRADUS_CHECK(result[i].defined() || allow_unused, AutogradError, "grad: input ", i,
                 " was not used to compute the outputs (pass allow_unused=true to get an "
                 "undefined gradient instead)");
  }
  return result;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  gradus::backward({*this},
                   gradient.defined() ? std::vector<Tensor>{gradient} : std::vector<Tensor>{},
                   retain_graph);
}

void Tensor::register_hook(GradHook hook) const {
  GRADUS_CHECK(requires_grad(), AutogradError,
               "register_hook: cannot register a hook on a tensor that does not require grad");
  if (is_leaf()) {
    impl()->autograd_mut().hooks.push_back(std::move(hook));
  } else {
    grad_fn()->pre_hooks.emplace_back(impl()->autograd()->output_nr, std::move(hook));
  }
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateHook hook) const {
  GRADUS_CHECK(is_leaf() && requires_grad(), AutogradError,
               "register_post_accumulate_grad_hook: only leaf tensors that require grad have an "
               "accumulated gradient");
  impl()->autograd_mut().post_accumulate_hooks.push_back(std::move(hook));
}

void Tensor::retain_grad() const {
  GRADUS_CHECK(requires_grad(), AutogradError, "retain_grad: the tensor does not require grad");
  if (is_leaf()) return;  // leaves keep .grad anyway
  AutogradMeta& meta = impl()->autograd_mut();
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  register_hook([weak](const Tensor& g) {
    if (auto self = weak.lock()) {
      AutogradMeta& m = self->autograd_mut();
      m.grad = m.grad ? add(Tensor(m.grad), g).impl_ptr() : g.clone().impl_ptr();
    }
    return Tensor();
  });
}

Tensor Tensor::detach() const {
  return as_strided_raw(sizes(), strides(), offset());
}

Tensor& Tensor::detach_() {
  if (AutogradMeta* m = impl()->autograd()) {
    m->grad_fn.reset();
    m->requires_grad = false;
  }
  return *this;
}

}  // namespace gradus
