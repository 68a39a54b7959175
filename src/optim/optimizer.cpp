// Optimizer base: groups, state, zero_grad, state_dict round trip, and the bucketing helper the
// fused multi-tensor steps use.
#include <cstdlib>
#include <set>

#include "gradus/autograd.h"
#include "gradus/ops.h"
#include "optim/common.h"

namespace gradus::optim {

// ---------------------------------------------------------------------------------------- groups
void Optimizer::add_group(std::vector<Tensor> params) {
  const std::string op = type_name();
  GRADUS_CHECK(!params.empty(), ValueError, op, ": got an empty parameter list");
  std::set<const TensorImpl*> seen;
  for (const auto& group : groups_)
    for (const Tensor& p : group) seen.insert(p.impl());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    GRADUS_CHECK(p.defined(), ValueError, op, ": parameter ", i, " is an undefined tensor");
    GRADUS_CHECK(is_floating(p.dtype()), DTypeError, op, ": parameter ", i, " has dtype ",
                 dtype_name(p.dtype()), "; only floating tensors can be optimized");
    GRADUS_CHECK(p.is_leaf(), ValueError, op, ": parameter ", i, " (shape ", shape_str(p.sizes()),
                 ") is not a leaf tensor; can't optimize a non-leaf tensor");
    GRADUS_CHECK(seen.insert(p.impl()).second, ValueError, op, ": parameter ", i, " (shape ",
                 shape_str(p.sizes()), ") appears more than once in the parameter groups");
  }
  state_.emplace_back(params.size());
  groups_.push_back(std::move(params));
}

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  GRADUS_CHECK(group < groups_.size(), IndexError, type_name(), ": param group ", group,
               " does not exist (", groups_.size(), " groups)");
  return groups_[group];
}

std::vector<Tensor> Optimizer::all_params() const {
  std::vector<Tensor> out;
  for (const auto& g : groups_) out.insert(out.end(), g.begin(), g.end());
  return out;
}

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) set_group_lr(g, lr);
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const auto& group : groups_) {
    for (const Tensor& p : group) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        grad.zero_();
      }
    }
  }
}

const ParamState& Optimizer::state(size_t group, size_t index) const {
  GRADUS_CHECK(group < state_.size() && index < state_[group].size(), IndexError, type_name(),
               ": no parameter ", index, " in group ", group);
  return state_[group][index];
}

Tensor& Optimizer::state_tensor(size_t group, size_t index, const std::string& name,
                                bool* created) {
  const Tensor& p = groups_[group][index];
  auto& tensors = state_[group][index].tensors;
  auto it = tensors.find(name);
  if (created) *created = it == tensors.end();
  if (it == tensors.end()) {
    it = tensors.emplace(name, zeros(p.sizes(), {p.dtype(), p.device()})).first;
  } else if (it->second.device() != p.device() || it->second.dtype() != p.dtype() ||
             !it->second.is_contiguous()) {
    // The model moved (module.to) after this state was created: follow the parameter.
    it->second = it->second.to(p.device(), p.dtype()).contiguous();
  }
  return it->second;
}

// ----------------------------------------------------------------------------------- capturable
void Optimizer::set_capturable(bool on) {
  NoGradGuard no_grad;
  if (!on) {
    if (!capturable()) return;
    const std::vector<int64_t> steps = device_steps();
    for (size_t g = 0; g < groups_.size(); ++g) {
      for (ParamState& st : state_[g]) {
        if (st.step != 0 || !st.tensors.empty()) st.step = steps[g];
      }
    }
    device_scalars_.clear();
    return;
  }
  set_capturable(false);  // again: the counts come back from the device first
  const std::string op = std::string(type_name()) + "::set_capturable";
  std::vector<Tensor> scalars;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Device device = groups_[g].front().device();
    int64_t step = -1;
    for (size_t i = 0; i < groups_[g].size(); ++i) {
      GRADUS_CHECK(groups_[g][i].device() == device, ValueError, op, ": param group ", g,
                   " spans devices (", device.str(), " and ", groups_[g][i].device().str(),
                   "); a capturable group keeps its learning rate and step count on one device");
      const ParamState& st = state_[g][i];
      if (st.tensors.empty() && st.step == 0) continue;  // not stepped yet
      GRADUS_CHECK(step < 0 || st.step == step, ValueError, op, ": the parameters of group ", g,
                   " are at different steps (", step, " and ", st.step, " for parameter ", i,
                   "); a capturable group counts steps once for all its parameters");
      step = st.step;
    }
    // {lr, step, 1}: the 1 is what the step adds to the count on the device.
    scalars.push_back(tensor({group_lr(g), static_cast<double>(std::max<int64_t>(step, 0)), 1.0},
                             {3}, {.dtype = DType::f64, .device = device}));
  }
  device_scalars_ = std::move(scalars);
}

void Optimizer::write_device_lr(size_t group, double lr) {
  if (!capturable()) return;
  NoGradGuard no_grad;
  device_scalars_[group].narrow(0, 0, 1).fill_(lr);
}

const double* Optimizer::advance_device_step(size_t group) {
  NoGradGuard no_grad;
  const Tensor& s = device_scalars_[group];
  for (const Tensor& p : groups_[group]) {
    GRADUS_CHECK(p.device() == s.device(), ValueError, type_name(), ": a parameter moved to ",
                 p.device().str(), " after set_capturable(true) put ", "param group ", group,
                 "'s learning rate and step on ", s.device().str(),
                 "; call set_capturable(true) again after moving the model");
  }
  s.narrow(0, 1, 1).add_(s.narrow(0, 2, 1));
  return static_cast<const double*>(s.raw_data());
}

std::vector<int64_t> Optimizer::device_steps() const {
  std::vector<int64_t> steps;
  for (const Tensor& s : device_scalars_) {
    steps.push_back(static_cast<int64_t>(s.to_vector<double>()[1]));
  }
  return steps;
}

// ------------------------------------------------------------------------------------ state_dict
uint64_t Optimizer::state_bytes() const {
  uint64_t bytes = 0;
  for (const std::vector<ParamState>& group : state_) {
    for (const ParamState& state : group) {
      for (const auto& [name, t] : state.tensors) {
        if (t.defined()) bytes += static_cast<uint64_t>(t.numel()) * t.element_size();
      }
    }
  }
  return bytes;
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  out.type = type_name();
  size_t index = 0;
  const std::vector<int64_t> group_steps = capturable() ? device_steps() : std::vector<int64_t>{};
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    for (const auto& [k, v] : group_options(g)) out.scalars[prefix + k] = v;
    out.scalars[prefix + "num_params"] = static_cast<double>(groups_[g].size());
    for (size_t i = 0; i < groups_[g].size(); ++i, ++index) {
      const ParamState& st = state_[g][i];
      if (st.step == 0 && st.tensors.empty()) continue;
      const std::string sp = "state." + std::to_string(index) + ".";
      out.scalars[sp + "step"] = static_cast<double>(capturable() ? group_steps[g] : st.step);
      for (const auto& [name, t] : st.tensors) out.tensors[sp + name] = t;
    }
  }
  return out;
}

bool parse_state_key(const std::string& key, size_t& index, std::string& name) {
  if (key.rfind("state.", 0) != 0) return false;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos || dot == 6 || dot + 1 >= key.size()) return false;
  for (size_t i = 6; i < dot; ++i)
    if (key[i] < '0' || key[i] > '9') return false;
  index = static_cast<size_t>(std::strtoull(key.c_str() + 6, nullptr, 10));
  name = key.substr(dot + 1);
  return true;
}

void Optimizer::load_state_dict(const OptimizerState& sd) {
  const std::string op = std::string(type_name()) + "::load_state_dict";
  GRADUS_CHECK(sd.type == type_name(), ValueError, op, ": the state belongs to a ", sd.type,
               " optimizer, not a ", type_name());
  // Locate every parameter by its global index.
  std::vector<std::pair<size_t, size_t>> where;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].size(); ++i) where.emplace_back(g, i);

  // Group options and sizes.
  std::vector<std::map<std::string, double>> options(groups_.size());
  for (const auto& [key, value] : sd.scalars) {
    if (key.starts_with("param_groups.")) {
      const size_t dot = key.find('.', 13);
      GRADUS_CHECK(dot != std::string::npos, ValueError, op, ": malformed key \"", key, "\"");
      const size_t g = static_cast<size_t>(std::strtoull(key.c_str() + 13, nullptr, 10));
      GRADUS_CHECK(g < groups_.size(), ValueError, op, ": the state has param group ", g,
                   " but this optimizer has ", groups_.size(), " groups");
      options[g][key.substr(dot + 1)] = value;
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto it = options[g].find("num_params");
    GRADUS_CHECK(it != options[g].end(), ValueError, op, ": the state has no param group ", g,
                 " (this optimizer has ", groups_.size(), " groups)");
    GRADUS_CHECK(static_cast<size_t>(it->second) == groups_[g].size(), ValueError, op,
                 ": param group ", g, " has ", groups_[g].size(), " parameters but the state has ",
                 it->second);
    options[g].erase(it);
  }

  // Per-parameter state, validated and converted before anything is replaced.
  std::vector<std::vector<ParamState>> fresh(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) fresh[g].resize(groups_[g].size());
  for (const auto& [key, value] : sd.scalars) {
    if (key.starts_with("param_groups.")) continue;
    size_t index;
    std::string name;
    GRADUS_CHECK(parse_state_key(key, index, name) && name == "step", ValueError, op,
                 ": unexpected scalar \"", key, "\"");
    GRADUS_CHECK(index < where.size(), ValueError, op, ": \"", key, "\" refers to parameter ",
                 index, " but the optimizer has ", where.size());
    fresh[where[index].first][where[index].second].step = static_cast<int64_t>(value);
  }
  for (const auto& [key, t] : sd.tensors) {
    size_t index;
    std::string name;
    GRADUS_CHECK(parse_state_key(key, index, name), ValueError, op, ": unexpected tensor \"", key,
                 "\"");
    GRADUS_CHECK(index < where.size(), ValueError, op, ": \"", key, "\" refers to parameter ",
                 index, " but the optimizer has ", where.size());
    const auto [g, i] = where[index];
    const Tensor& p = groups_[g][i];
    GRADUS_CHECK(t.defined(), ValueError, op, ": \"", key, "\" is an undefined tensor");
    GRADUS_CHECK(t.sizes() == p.sizes(), ShapeError, op, ": \"", key, "\" has shape ",
                 shape_str(t.sizes()), " but parameter ", index, " has shape ",
                 shape_str(p.sizes()));
    NoGradGuard no_grad;
    // A private copy on the parameter's device and dtype (never an alias of the checkpoint).
    fresh[g][i].tensors[name] = t.detach().to(p.device(), p.dtype()).clone();
  }

  // Hyperparameters last: set_group_options validates, so restore the old ones on failure.
  std::vector<std::map<std::string, double>> old;
  for (size_t g = 0; g < groups_.size(); ++g) old.push_back(group_options(g));
  try {
    for (size_t g = 0; g < groups_.size(); ++g) set_group_options(g, options[g]);
  } catch (...) {
    for (size_t g = 0; g < groups_.size(); ++g) set_group_options(g, old[g]);
    throw;
  }
  state_ = std::move(fresh);
  if (capturable()) {  // the loaded counts and learning rates go to the device
    device_scalars_.clear();
    set_capturable(true);
  }
}

// ----------------------------------------------------------------------------------- bucketing
namespace detail {

void Bucket::finish() {
  for (auto& [original, staged] : write_back) original.copy_(staged);
  for (size_t i = 0; i < params.size(); ++i) params[i].bump_version();
  for (auto& [original, staged] : write_back) original.bump_version();
}

std::vector<Bucket> make_buckets(const char* op, const std::vector<Tensor>& params,
                                 const std::function<int64_t(size_t)>& key) {
  std::vector<Bucket> buckets;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    Tensor grad = p.grad();
    if (!grad.defined()) continue;
    GRADUS_CHECK(grad.device() == p.device(), DeviceError, op, ": parameter ", i, " is on ",
                 p.device().str(), " but its gradient is on ", grad.device().str());
    GRADUS_CHECK(grad.sizes() == p.sizes(), ShapeError, op, ": parameter ", i, " has shape ",
                 shape_str(p.sizes()), " but its gradient has shape ", shape_str(grad.sizes()));
    if (grad.dtype() != p.dtype()) grad = grad.to(p.dtype());
    if (!grad.is_contiguous()) grad = grad.contiguous();
    const int64_t k = key(i);
    Bucket* b = nullptr;
    for (auto& existing : buckets)
      if (existing.device == p.device() && existing.dtype == p.dtype() && existing.key == k)
        b = &existing;
    if (b == nullptr) {
      buckets.emplace_back();
      b = &buckets.back();
      b->device = p.device();
      b->dtype = p.dtype();
      b->key = k;
    }
    b->indices.push_back(i);
    if (p.is_contiguous()) {
      b->params.push_back(p);
    } else {
      Tensor staged = p.detach().contiguous();
      b->params.push_back(staged);
      b->write_back.emplace_back(p, staged);
    }
    b->grads.push_back(grad);
  }
  return buckets;
}

}  // namespace detail
}  // namespace gradus::optim
