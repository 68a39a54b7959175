// Containers: Sequential (chains its children's forwards) and ModuleList (holds modules without a
// forward). Children are named "0", "1", ... like PyTorch, so state_dict keys are "0.weight", ...
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "gradus/nn/module.h"

namespace gradus::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  explicit Sequential(const std::vector<std::shared_ptr<Module>>& modules);

  // Appends under the next index name ("0", "1", ...). Returns *this for chaining.
  Sequential& push_back(std::shared_ptr<Module> module);
  // Appends under an explicit name (like nn.Sequential(OrderedDict(...))).
  Sequential& push_back(const std::string& name, std::shared_ptr<Module> module);

  Tensor forward(const Tensor& x) override;

  // Activation checkpointing by segments: with k > 0, forward runs every k consecutive children
  // as one gradus::checkpoint segment (only the segment inputs are kept; backward recomputes the
  // segment), trading one extra forward for the activations' memory. 0 turns it off. Parameter
  // names do not change.
  Sequential& checkpoint_every(int64_t k);
  int64_t checkpoint_segment() const { return checkpoint_every_; }

  size_t size() const { return named_children().size(); }
  bool empty() const { return size() == 0; }
  // Negative indices count from the end. Throws IndexError when out of range.
  std::shared_ptr<Module> operator[](int64_t index) const;
  // The module at `index` as M; throws ValueError if it is something else.
  template <typename M>
  std::shared_ptr<M> at(int64_t index) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[index]);
    GRADUS_CHECK(m != nullptr, ValueError, type_name(), "::at: module ", index, " is a ",
                 (*this)[index]->type_name());
    return m;
  }

 private:
  int64_t checkpoint_every_ = 0;
};

// modules applied in turn to x; with checkpoint_every = k > 0 (and gradients on), every k of them
// form one activation-checkpointed segment (autograd's checkpoint: recomputed in backward).
Tensor forward_chain(const std::vector<std::shared_ptr<Module>>& modules, const Tensor& x,
                     int64_t checkpoint_every = 0);

class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);

  ModuleList& push_back(std::shared_ptr<Module> module);
  size_t size() const { return named_children().size(); }
  bool empty() const { return size() == 0; }
  std::shared_ptr<Module> operator[](int64_t index) const;
  template <typename M>
  std::shared_ptr<M> at(int64_t index) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[index]);
    GRADUS_CHECK(m != nullptr, ValueError, type_name(), "::at: module ", index, " is a ",
                 (*this)[index]->type_name());
    return m;
  }
  std::vector<std::shared_ptr<Module>>::const_iterator begin() const { return list_.begin(); }
  std::vector<std::shared_ptr<Module>>::const_iterator end() const { return list_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> list_;
};

}  // namespace gradus::nn
