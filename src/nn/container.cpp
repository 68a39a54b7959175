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
  std::vector<std::shared_ptr<Module>> modules;
  for (const auto& item : named_children()) modules.push_back(item.second);
  return forward_chain(modules, x, checkpoint_every_);
}

Tensor forward_chain(const std::vector<std::shared_ptr<Module>>& modules, const Tensor& x,
                     int64_t checkpoint_every) {
  Tensor h = x;
  if (checkpoint_every <= 0 || !is_grad_enabled()) {
    for (const auto& m : modules) h = (*m)(h);
    return h;
  }
  const size_t every = static_cast<size_t>(checkpoint_every);
  for (size_t begin = 0; begin < modules.size(); begin += every) {
    const size_t end = std::min(modules.size(), begin + every);
    std::vector<std::shared_ptr<Module>> segment(modules.begin() + static_cast<ptrdiff_t>(begin),
                                                 modules.begin() + static_cast<ptrdiff_t>(end));
    std::vector<Tensor> params;
    for (const auto& m : segment) {
      for (const Tensor& p : m->trainable_parameters()) params.push_back(p);
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
