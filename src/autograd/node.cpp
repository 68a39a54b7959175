#include "autograd/node.h"

#include <atomic>

#include "gradus/autograd.h"
#include "gradus/core/profiling.h"
#include "gradus/ops.h"

namespace gradus::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  data_ = t.as_strided_raw(t.sizes(), t.strides(), t.offset());
  version_ = t.version();
}

Tensor SavedTensor::get() const {
  if (data_.defined() && data_.version() != version_) {
    throw AutogradError(detail::str_cat(
        "one of the tensors needed for gradient computation has been modified by an in-place "
        "operation: a ",
        dtype_name(data_.dtype()), " tensor of shape ", shape_str(data_.sizes()), " is at version ",
        data_.version(), " but was saved at version ", version_,
        ". Use out-of-place ops (or clone()) on tensors that backward needs."));
  }
  return data_;
}

TensorList FunctionNode::apply(TensorList&& grads) {
  if (!fn_) {
    throw AutogradError(std::string("trying to backward through the graph a second time (") +
                        name_ +
                        "): its saved tensors were freed after the first backward. Pass "
                        "retain_graph=true to the first backward to keep them.");
  }
  return fn_(grads, needs_);
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  std::shared_ptr<TensorImpl> leaf_impl = leaf_.lock();
  if (!leaf_impl) return {};
  Tensor leaf(leaf_impl);
  Tensor g = std::move(grads[0]);
  AutogradMeta& meta = leaf_impl->autograd_mut();
  for (const GradHook& hook : meta.hooks) {
    Tensor replaced = hook(g);
    if (replaced.defined()) g = replaced;
  }
  NoGradGuard no_grad;
  if (!meta.grad) {
    // Steal the buffer when nobody else holds it and it is dense; otherwise copy, because the
    // same gradient tensor may flow to several leaves (add's backward passes it through).
    if (g.impl_ptr().use_count() == 1 && g.is_contiguous() && g.dtype() == leaf.dtype()) {
      meta.grad = g.impl_ptr();
    } else {
      meta.grad = g.to(leaf.dtype()).contiguous().clone().impl_ptr();
    }
  } else {
    Tensor(meta.grad).add_(g);
  }
  for (const PostAccumulateHook& hook : meta.post_accumulate_hooks) hook(leaf);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& meta = t.impl()->autograd_mut();
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    acc->outputs.push_back({t.sizes(), t.dtype(), t.device()});
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

bool any_requires_grad(const TensorList& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

TensorList record_multi(const char* name, TensorList outputs, const TensorList& inputs,
                        BackwardFn fn) {
  // Every op ends here, recorded or not: the one place to give its profiler scope the shapes.
  GRADUS_PROFILE_TENSORS(inputs, outputs.empty() ? nullptr : &outputs[0]);
  const bool anomaly = is_anomaly_enabled();
  if (anomaly) {
    check_finite(outputs, std::string("the forward of '") + name + "'", capture_call_stack());
  }
  if (!any_requires_grad(inputs)) return outputs;
  NeedsGrad needs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    needs[i] = inputs[i].defined() && inputs[i].requires_grad();
  }
  auto node = std::make_shared<FunctionNode>(name, std::move(fn), needs);
  if (anomaly) node->creation_trace = capture_call_stack();
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next_edges.push_back(gradient_edge(t));
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    node->outputs.push_back({out.sizes(), out.dtype(), out.device()});
    if (!is_floating(out.dtype())) continue;  // integer outputs (argmax indices) carry no grad
    AutogradMeta& meta = out.impl()->autograd_mut();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
  return outputs;
}

Tensor record(const char* name, Tensor output, const TensorList& inputs, BackwardFn fn) {
  if (!any_requires_grad(inputs)) {
    GRADUS_PROFILE_TENSORS(inputs, &output);
    return output;
  }
  return record_multi(name, {std::move(output)}, inputs, std::move(fn))[0];
}

}  // namespace gradus::autograd
