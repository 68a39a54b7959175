// Sequential and ModuleList.
#include "gradus/nn/container.h"

#include <algorithm>

#include "gradus/autograd.h"

namespace gradus::nn {

namespace {
std::shared_ptr<Module> child_at(const Module& m, int64_t index) {
  const auto& children = m.named_children();
  const int64_t n = static_cast<int64_t>(children.size());
  GRADUS_CHECK(index >= -n && index < n, IndexError, m.type_name(), ": index ", index,
               " is out of range for ", n, " modules");
  return children[static_cast<size_t>(index < 0 ? index + n : index)].second;
}
}  // namespace

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& modules) {
  for (const auto& m : modules) push_back(m);
}

Sequential& Sequential::push_back(std::shared_ptr<Module> module) {
  return push_back(std::to_string(size()), std::move(module));
}

Sequential& Sequential::push_back(const std::string& name, std::shared_ptr<Module> module) {
  register_module(name, std::move(module));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  const auto children = named_children();
  Tensor h = x;
  if (checkpoint_every_ <= 0 || !is_grad_enabled()) {
    for (const auto& item : children) h = (*item.second)(h);
    return h;
  }
  for (size_t begin = 0; begin < children.size(); begin += static_cast<size_t>(checkpoint_every_)) {
    const size_t end = std::min(children.size(), begin + static_cast<size_t>(checkpoint_every_));
    std::vector<std::shared_ptr<Module>> segment;
    std::vector<Tensor> params;
    for (size_t i = begin; i < end; ++i) {
      segment.push_back(children[i].second);
      for (const Tensor& p : children[i].second->trainable_parameters()) params.push_back(p);
    }
    h = checkpoint(
        [segment](const std::vector<Tensor>& in) {
          Tensor y = in[0];
          for (const auto& m : segment) y = (*m)(y);
          return y;
        },
        {h}, params);
  }
  return h;
}

Sequential& Sequential::checkpoint_every(int64_t k) {
  GRADUS_CHECK(k >= 0, ValueError, "Sequential::checkpoint_every: k must be >= 0, got ", k);
  checkpoint_every_ = k;
  return *this;
}

std::shared_ptr<Module> Sequential::operator[](int64_t index) const {
  return child_at(*this, index);
}

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

ModuleList& ModuleList::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), module);
  list_.push_back(std::move(module));
  return *this;
}

std::shared_ptr<Module> ModuleList::operator[](int64_t index) const {
  return child_at(*this, index);
}

}  // namespace gradus::nn
