// Module::operator(): forward and forward_multi with forward-pre, forward and full-backward
// hooks around them, and activation checkpointing (Module::set_checkpoint).
#include <algorithm>

#include "gradus/autograd.h"
#include "gradus/autograd/function.h"
#include "gradus/nn/module.h"

namespace gradus::nn {

struct ModuleHooks {
  uint64_t next_id = 1;
  std::vector<std::pair<uint64_t, Module::ForwardPreHook>> pre;
  std::vector<std::pair<uint64_t, Module::ForwardHook>> post;
  std::vector<std::pair<uint64_t, Module::BackwardHook>> backward;
  bool empty() const { return pre.empty() && post.empty() && backward.empty(); }
};

void HookHandle::remove() {
  const std::shared_ptr<ModuleHooks> h = hooks_.lock();
  if (!h) return;
  auto drop = [this](auto& list) {
    list.erase(std::remove_if(list.begin(), list.end(),
                              [this](const auto& entry) { return entry.first == id_; }),
               list.end());
  };
  drop(h->pre);
  drop(h->post);
  drop(h->backward);
}

ModuleHooks& Module::hooks() {
  if (!hooks_) hooks_ = std::make_shared<ModuleHooks>();
  return *hooks_;
}

HookHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  ModuleHooks& h = hooks();
  h.pre.emplace_back(h.next_id, std::move(hook));
  return HookHandle(hooks_, h.next_id++);
}

HookHandle Module::register_forward_hook(ForwardHook hook) {
  ModuleHooks& h = hooks();
  h.post.emplace_back(h.next_id, std::move(hook));
  return HookHandle(hooks_, h.next_id++);
}

HookHandle Module::register_full_backward_hook(BackwardHook hook) {
  ModuleHooks& h = hooks();
  h.backward.emplace_back(h.next_id, std::move(hook));
  return HookHandle(hooks_, h.next_id++);
}

Tensor Module::forward_multi(const std::vector<Tensor>& inputs) {
  GRADUS_CHECK(inputs.size() == 1, ValueError, type_name(), ": forward takes one input, got ",
               inputs.size(), " (a module with several inputs overrides forward_multi)");
  return forward(inputs[0]);
}

namespace {

using autograd::FunctionContext;
using autograd::TensorList;

// Full backward hooks: identities around the module's inputs and output. The output's backward
// sees grad_outputs; the inputs' backward then sees grad_inputs and fires the hooks (or the
// output's backward fires them itself when no input needs a gradient).
struct BackwardHookState {
  Module* module;
  std::shared_ptr<Module> keep;  // the module outlives the graph when a shared_ptr owns it
  std::vector<Module::BackwardHook> hooks;
  size_t num_inputs = 0;
  std::vector<size_t> defined;  // the inputs that pass through HookInputs (undefined ones cannot)
  bool inputs_need_grad = false;
  TensorList grad_outputs;
  void fire(const TensorList& grad_inputs) const {
    for (const auto& hook : hooks) hook(*module, grad_inputs, grad_outputs);
  }
};

struct HookInputs : autograd::Function {
  std::shared_ptr<BackwardHookState> state;
  explicit HookInputs(std::shared_ptr<BackwardHookState> s) : state(std::move(s)) {}
  std::string name() const override { return "BackwardHookInputs"; }
  TensorList forward(FunctionContext&, const TensorList& in) override { return in; }
  TensorList backward(FunctionContext&, const TensorList& g) override {
    TensorList all(state->num_inputs);
    for (size_t i = 0; i < g.size(); ++i) all[state->defined[i]] = g[i];
    state->fire(all);
    return g;
  }
};

struct HookOutput : autograd::Function {
  std::shared_ptr<BackwardHookState> state;
  explicit HookOutput(std::shared_ptr<BackwardHookState> s) : state(std::move(s)) {}
  std::string name() const override { return "BackwardHookOutput"; }
  TensorList forward(FunctionContext&, const TensorList& in) override { return in; }
  TensorList backward(FunctionContext&, const TensorList& g) override {
    state->grad_outputs = g;
    if (!state->inputs_need_grad) state->fire(TensorList(state->num_inputs));
    return g;
  }
};

}  // namespace

Tensor Module::run_forward(const std::vector<Tensor>& inputs, bool single) {
  if (!checkpoint_ || !is_grad_enabled())
    return single ? forward(inputs[0]) : forward_multi(inputs);
  // The recomputation runs in backward: hold the module if a shared_ptr owns it.
  std::shared_ptr<Module> keep = weak_from_this().lock();
  return checkpoint(
      [this, keep, single](const std::vector<Tensor>& in) {
        return single ? forward(in[0]) : forward_multi(in);
      },
      inputs, trainable_parameters());
}

Tensor Module::call(std::vector<Tensor> inputs, bool single) {
  if (!hooks_ || hooks_->empty()) return run_forward(inputs, single);
  // Copies: a hook may remove itself (or another) while running.
  const ModuleHooks hooks = *hooks_;
  for (const auto& [id, hook] : hooks.pre) {
    if (std::optional<std::vector<Tensor>> replaced = hook(*this, inputs)) {
      GRADUS_CHECK(!single || replaced->size() == 1, ValueError, type_name(),
                   ": a forward pre-hook returned ", replaced->size(),
                   " inputs for a single-input forward");
      inputs = std::move(*replaced);
    }
  }
  std::shared_ptr<BackwardHookState> state;
  if (!hooks.backward.empty() && is_grad_enabled()) {
    state = std::make_shared<BackwardHookState>();
    state->module = this;
    state->keep = weak_from_this().lock();
    for (const auto& [id, hook] : hooks.backward) state->hooks.push_back(hook);
    state->num_inputs = inputs.size();
    TensorList passing;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) continue;
      state->defined.push_back(i);
      passing.push_back(inputs[i]);
      state->inputs_need_grad = state->inputs_need_grad || inputs[i].requires_grad();
    }
    if (state->inputs_need_grad) {
      passing = autograd::apply(std::make_shared<HookInputs>(state), passing);
      for (size_t k = 0; k < passing.size(); ++k) inputs[state->defined[k]] = passing[k];
    }
  }
  Tensor output = run_forward(inputs, single);
  for (const auto& [id, hook] : hooks.post) {
    if (std::optional<Tensor> replaced = hook(*this, inputs, output)) output = std::move(*replaced);
  }
  if (state && output.requires_grad()) {
    output = autograd::apply(std::make_shared<HookOutput>(state), {output})[0];
  }
  return output;
}

Tensor Module::operator()(const Tensor& x) {
  return call({x}, true);
}

Tensor Module::operator()(const std::vector<Tensor>& inputs) {
  GRADUS_CHECK(!inputs.empty(), ValueError, type_name(), ": called with no input");
  return call(inputs, /*single=*/false);
}

}  // namespace gradus::nn
