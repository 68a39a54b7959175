// Sequential and ModuleList.
#include "gradus/nn/container.h"

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
  Tensor h = x;
  for (const auto& item : named_children()) h = item.second->forward(h);
  return h;
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
