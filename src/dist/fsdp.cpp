#include "gradus/dist/fsdp.h"

#include <algorithm>
#include <map>

#include "gradus/autograd.h"
#include "gradus/nn/container.h"

namespace gradus::dist {

namespace {

void collect_default_units(nn::Module& m, std::vector<nn::Module*>& units) {
  const bool container =
      dynamic_cast<nn::ModuleList*>(&m) != nullptr || dynamic_cast<nn::Sequential*>(&m) != nullptr;
  for (const auto& [name, child] : m.named_children()) {
    if (container && !child->parameters().empty()) {
      units.push_back(child.get());
    } else {
      collect_default_units(*child, units);
    }
  }
}

}  // namespace

ShardUnits plan_shard_units(nn::Module& model, const std::vector<Tensor>& params,
                            std::vector<nn::Module*> units) {
  if (units.empty()) collect_default_units(model, units);
  std::map<const TensorImpl*, size_t> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].impl()] = i;
  // The unit of each parameter; a parameter two units share goes to the root (0).
  std::vector<size_t> owner(params.size(), 0);
  std::vector<int> claims(params.size(), 0);
  for (size_t u = 0; u < units.size(); ++u) {
    GRADUS_CHECK(units[u] != nullptr, ValueError, "plan_shard_units: unit ", u, " is null");
    for (const Tensor& p : units[u]->parameters()) {
      auto it = index.find(p.impl());
      if (it == index.end()) continue;  // (frozen, or not this rank's to update)
      owner[it->second] = u + 1;
      ++claims[it->second];
    }
  }
  ShardUnits plan;
  plan.modules = units;
  plan.params.resize(units.size() + 1);
  for (size_t i = 0; i < params.size(); ++i)
    plan.params[claims[i] == 1 ? owner[i] : 0].push_back(i);
  return plan;
}

FullyShard::FullyShard(nn::Module& model, ZeroRedundancyOptimizer& sharded, ShardUnits units,
                       FullyShardOptions options)
    : model_(model), sharded_(sharded), units_(std::move(units)), options_(options) {
  GRADUS_CHECK(sharded_.stage() >= 2, ValueError, "FullyShard: the optimizer shards at stage ",
               sharded_.stage(), "; fully sharded training needs stage 2 or 3");
  GRADUS_CHECK(units_.params.size() == sharded_.num_units() &&
                   units_.modules.size() + 1 == units_.params.size(),
               ValueError, "FullyShard: ", units_.params.size(), " parameter units for ",
               units_.modules.size(), " modules and an optimizer of ", sharded_.num_units(),
               " units (build both from one plan_shard_units)");
  const std::vector<Tensor> params = sharded_.all_params();
  trainable_.assign(units_.params.size(), 0);
  arrived_.resize(units_.params.size());
  for (size_t u = 0; u < units_.params.size(); ++u) {
    for (size_t i : units_.params[u]) {
      if (!params[i].requires_grad()) continue;
      ++trainable_[u];
      const std::weak_ptr<bool> alive = alive_;
      params[i].register_post_accumulate_grad_hook([this, alive, u](Tensor& p) {
        if (!alive.expired()) on_gradient(u, p.impl());
      });
    }
  }
  auto hook = [this](nn::Module& m, size_t u) {
    hooks_.push_back(m.register_forward_pre_hook(
        [this, u](nn::Module&, const std::vector<Tensor>&) -> std::optional<std::vector<Tensor>> {
          before_unit(u);
          return std::nullopt;
        }));
    hooks_.push_back(
        m.register_forward_hook([this, u](nn::Module&, const std::vector<Tensor>&,
                                          const Tensor& output) -> std::optional<Tensor> {
          after_unit(u, output);
          return std::nullopt;
        }));
  };
  hook(model_, 0);
  for (size_t k = 0; k < units_.modules.size(); ++k) hook(*units_.modules[k], k + 1);
}

FullyShard::~FullyShard() {
  for (nn::HookHandle& h : hooks_) h.remove();
}

void FullyShard::before_unit(size_t unit) {
  sharded_.wait_gathered(unit);
  if (in_backward_) return;  // (a checkpointed unit's recomputation)
  if (unit == 0) {
    recording_.clear();
    if (!order_.empty()) prefetch(order_.front());
    return;
  }
  recording_.push_back(unit);
  const size_t at = recording_.size();  // the next unit's place, if this forward runs as the last
  if (at < order_.size() && order_[at - 1] == unit) prefetch(order_[at]);
}

void FullyShard::after_unit(size_t unit, const Tensor& output) {
  const bool backward_follows = is_grad_enabled() && output.defined() && output.requires_grad();
  if (unit == 0 && !in_backward_) order_ = recording_;
  if (backward_follows) {
    const std::weak_ptr<bool> alive = alive_;
    output.register_hook([this, alive, unit](const Tensor&) {
      if (!alive.expired()) before_unit_backward(unit);
      return Tensor();
    });
  }
  // The root stays gathered until its backward is done; a unit is freed (stage 3) after its
  // forward when asked, and always when no backward follows, except the last unit of the forward:
  // its backward comes next, and freeing it would only gather it again at once.
  const bool last = !order_.empty() && unit == order_.back() && recording_.size() == order_.size();
  if (unit != 0 && (!backward_follows || (options_.reshard_after_forward && !last))) {
    sharded_.release(unit);
  }
  if (unit == 0 && !backward_follows) sharded_.release(0);
}

void FullyShard::before_unit_backward(size_t unit) {
  if (!in_backward_) {
    in_backward_ = true;
    // The previous backward's reductions (gradient accumulation) land before this one adds.
    sharded_.wait_reductions();
    const std::weak_ptr<bool> alive = alive_;
    autograd::queue_callback([this, alive] {
      if (!alive.expired()) after_backward();
    });
  }
  sharded_.wait_gathered(unit);
  sharded_.prepare_gradients(unit);
  if (unit == 0) {  // (the root's output is the model's: its backward starts with the last unit)
    if (!order_.empty()) prefetch(order_.back());
    return;
  }
  // The unit before it in the forward: its backward comes next.
  auto at = std::find(order_.begin(), order_.end(), unit);
  if (at != order_.end() && at != order_.begin()) prefetch(*(at - 1));
}

void FullyShard::on_gradient(size_t unit, const TensorImpl* param) {
  std::unordered_set<const TensorImpl*>& arrived = arrived_[unit];
  arrived.insert(param);
  if (arrived.size() < trainable_[unit]) return;
  arrived.clear();
  sharded_.reduce_gradients(unit);
  sharded_.release(unit);  // (stage 3; nothing to free at stage 2)
}

void FullyShard::after_backward() {
  in_backward_ = false;
  for (auto& arrived : arrived_) arrived.clear();
  // A unit whose parameters did not all get a gradient (one unused this step) and prefetched
  // units that did not run: their memory goes back now, their reductions start in step().
  for (size_t u = 0; u < units_.params.size(); ++u) sharded_.release(u);
}

void FullyShard::prefetch(size_t unit) {
  if (options_.prefetch) sharded_.gather(unit);
}

void FullyShard::gather_all() {
  for (size_t u = 0; u < units_.params.size(); ++u) sharded_.gather(u, /*exact=*/true);
  for (size_t u = 0; u < units_.params.size(); ++u) sharded_.wait_gathered(u, /*exact=*/true);
}

void FullyShard::release_all(bool adopt_writes) {
  for (size_t u = 0; u < units_.params.size(); ++u) release_unit(u, adopt_writes);
}

std::vector<Tensor> FullyShard::unit_parameters(size_t unit) const {
  const std::vector<Tensor> params = sharded_.all_params();
  std::vector<Tensor> mine;
  for (size_t i : units_.params.at(unit)) mine.push_back(params[i]);
  return mine;
}

void FullyShard::gather_unit(size_t unit) {
  sharded_.wait_gathered(unit, /*exact=*/true);
}

void FullyShard::release_unit(size_t unit, bool adopt_writes) {
  if (adopt_writes) sharded_.adopt_gathered(unit);
  sharded_.release(unit);
}

}  // namespace gradus::dist
