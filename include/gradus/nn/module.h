// nn::Module: the base of every layer and model. A module owns named parameters (trainable
// tensors), buffers (state that is saved but not trained, e.g. BatchNorm's running statistics) and
// child modules, all kept in registration order. Hierarchical names are identical to PyTorch's
// state_dict names ("features.1.running_mean"), so weights move between the two by name.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::nn {

// An insertion-ordered name -> Tensor map (what state_dict() returns and load_state_dict()
// takes). Converts implicitly from std::map (sorted by name) and from a vector of pairs.
class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  StateDict() = default;
  StateDict(const std::map<std::string, Tensor>& items);  // NOLINT: implicit on purpose
  StateDict(std::vector<Item> items);                     // NOLINT: implicit on purpose
  StateDict(std::initializer_list<Item> items);

  // Appends (name, t); throws ValueError if the name is already present.
  void insert(const std::string& name, const Tensor& t);
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws ValueError naming the key if absent.
  const Tensor& at(const std::string& name) const;
  // nullptr when absent.
  const Tensor* find(const std::string& name) const;
  std::vector<std::string> keys() const;
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<Item>::const_iterator begin() const { return items_.begin(); }
  std::vector<Item>::const_iterator end() const { return items_.end(); }
  const std::vector<Item>& items() const { return items_; }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

// What load_state_dict found (strict mode throws instead of returning a non-empty result).
struct LoadResult {
  std::vector<std::string> missing_keys;     // in the module, not in the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, not in the module
  // "name: checkpoint [a, b] vs model [c, d]"; these entries were not loaded.
  std::vector<std::string> mismatched_keys;
  bool ok() const {
    return missing_keys.empty() && unexpected_keys.empty() && mismatched_keys.empty();
  }
};

struct ModuleHooks;

// Returned by the register_*_hook methods; remove() unregisters the hook (safe to call twice, or
// after the module is gone).
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<ModuleHooks> hooks, uint64_t id) : hooks_(std::move(hooks)), id_(id) {}
  void remove();

 private:
  std::weak_ptr<ModuleHooks> hooks_;
  uint64_t id_ = 0;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  // Modules hold tensor handles: a copy would silently share parameters, so there is none.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation. The default throws (containers such as ModuleList have none).
  virtual Tensor forward(const Tensor& x);
  // The computation on several inputs (e.g. tokens and a mask). Modules that take more than one
  // override this; the default hands a single input to forward(x) and refuses more.
  virtual Tensor forward_multi(const std::vector<Tensor>& inputs);

  // Calls forward(x) / forward_multi(inputs) with the hooks below run around it, under
  // gradus::checkpoint when set_checkpoint(true) (and grad mode is on).
  Tensor operator()(const Tensor& x);
  Tensor operator()(const std::vector<Tensor>& inputs);
  template <typename... More>
  Tensor operator()(const Tensor& a, const Tensor& b, const More&... more) {
    return (*this)(std::vector<Tensor>{a, b, more...});
  }

  // ---- hooks (run by operator(), in registration order; HookHandle::remove() drops one) ----
  // Before forward: may return replacement inputs.
  using ForwardPreHook =
      std::function<std::optional<std::vector<Tensor>>(Module&, const std::vector<Tensor>&)>;
  // After forward: may return a replacement output.
  using ForwardHook = std::function<std::optional<Tensor>(Module&, const std::vector<Tensor>&,
                                                          const Tensor& output)>;
  // During backward, once the gradients of the module's inputs are known: grad_inputs (one per
  // input; undefined for an input that needs none) and grad_outputs. Observes only.
  using BackwardHook = std::function<void(Module&, const std::vector<Tensor>& grad_inputs,
                                          const std::vector<Tensor>& grad_outputs)>;
  HookHandle register_forward_pre_hook(ForwardPreHook hook);
  HookHandle register_forward_hook(ForwardHook hook);
  HookHandle register_full_backward_hook(BackwardHook hook);

  // Activation checkpointing for this module: operator() keeps only its input and recomputes
  // forward during backward (the random state replayed). A flag rather than a wrapping module,
  // so state_dict names do not change. A module not owned by a shared_ptr must outlive backward.
  Module& set_checkpoint(bool on = true) {
    checkpoint_ = on;
    return *this;
  }
  bool is_checkpointed() const { return checkpoint_; }

  // ---- registration (names: non-empty, no '.', unique within this module) ----
  // Marks t as requiring grad (when requires_grad and floating) and returns the same handle.
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // Puts `module` in the place of the child called `name` (the same name and order, as assigning
  // a submodule attribute in PyTorch does) and returns the one it replaces; ValueError when there
  // is no such child. For swapping layers after construction (a tensor-parallel split).
  std::shared_ptr<Module> replace_module(const std::string& name, std::shared_ptr<Module> module);

  // ---- traversal (PyTorch order: own entries first, then children depth-first) ----
  // parameters()/named_parameters()/buffers() list a tensor shared by several modules once.
  std::vector<Tensor> parameters(bool recurse = true) const;
  // The parameters that require grad (what is trained: frozen ones are left out).
  std::vector<Tensor> trainable_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // This module (name "") and every descendant, pre-order, each module once.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  std::vector<std::shared_ptr<Module>> modules();
  // The child registered under `name` (nullptr when absent).
  std::shared_ptr<Module> child(const std::string& name) const;

  // ---- state ----
  // Parameters and buffers under their dotted names (a shared tensor appears under every name,
  // like PyTorch). The tensors are the live handles (detach/clone to snapshot).
  StateDict state_dict() const;
  // Copies values in place (casting dtype, moving across devices), so handles held elsewhere
  // (optimizers) stay valid. Validates everything before copying anything. strict: throws one
  // error listing every missing key, unexpected key and shape mismatch (ShapeError when only
  // shapes differ, else ValueError). Non-strict: loads what matches and returns the rest.
  LoadResult load_state_dict(const StateDict& state, bool strict = true);

  // ---- modes and placement ----
  // Sets training mode on this module and all descendants; returns *this.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  // Move / cast every parameter, gradient and buffer in place (Tensor::set_data), so the
  // parameter handles stay the same objects. to(DType) converts floating tensors only (integer
  // buffers such as num_batches_tracked keep their dtype).
  Module& to(Device device);
  Module& to(DType dtype);
  Module& to(Device device, DType dtype);
  // Drops every parameter's gradient (PyTorch's set_to_none=True default).
  void zero_grad();
  // requires_grad off / on for every parameter. A frozen parameter gets no gradient: backward
  // skips its gradient kernels (e.g. the weight-gradient GEMM of a Linear) and optimizers skip it.
  void freeze();
  void unfreeze();
  void requires_grad_(bool on) { on ? unfreeze() : freeze(); }
  // The same for the parameters whose state_dict name starts with `prefix` ("features." freezes
  // features.0.weight, features.3.bias, ...); keep_norm_eval also keeps the batch-norm modules
  // under that prefix in eval mode through later train() calls (their running statistics stay as
  // loaded, as fine-tuning wants). Returns how many parameters matched; ValueError naming the
  // module's top-level names when none does.
  int64_t freeze(const std::string& prefix, bool keep_norm_eval = false);
  int64_t unfreeze(const std::string& prefix);
  // Whether train() leaves this module (a frozen batch norm) in eval mode.
  bool keeps_eval() const { return keep_eval_; }
  int64_t num_parameters(bool trainable_only = false) const;
  // Calls fn on every module (pre-order).
  void apply(const std::function<void(Module&)>& fn);

  // ---- printing ----
  // The module tree like PyTorch's print(model).
  std::string repr() const;
  // The class name shown by repr() (default: the demangled C++ class name without namespaces).
  virtual std::string type_name() const;
  // The part inside the parentheses of a leaf's repr ("in_features=784, ...").
  virtual std::string extra_repr() const { return {}; }

 protected:
  // Hook for modules whose state depends on the training flag (default: nothing).
  virtual void on_train(bool on) {}

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  // operator()'s body: hooks, checkpoint, then forward (single) or forward_multi.
  Tensor call(std::vector<Tensor> inputs, bool single);
  Tensor run_forward(const std::vector<Tensor>& inputs, bool single);
  ModuleHooks& hooks();
  void check_new_name(const std::string& name, const char* what) const;
  // All (name, tensor) pairs of params (or buffers) in the subtree, without dedup.
  void collect(const std::string& prefix, bool params, bool buffers, bool recurse,
               std::vector<std::pair<std::string, Tensor>>& out) const;
  void convert(const std::function<Tensor(const Tensor&)>& fn);

  bool training_ = true;
  bool keep_eval_ = false;
  bool checkpoint_ = false;
  std::shared_ptr<ModuleHooks> hooks_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// nn::Checkpoint(module): `module` with activation checkpointing on (the same object, returned for
// chaining, e.g. seq.push_back(nn::Checkpoint(block))). See Module::set_checkpoint.
template <typename M>
std::shared_ptr<M> Checkpoint(std::shared_ptr<M> module) {
  module->set_checkpoint(true);
  return module;
}

std::ostream& operator<<(std::ostream& os, const Module& m);

// Formats a double the way Python's repr() does (1e-05, 0.1, 1.0), for PyTorch-identical reprs.
std::string python_float(double v);

}  // namespace gradus::nn
