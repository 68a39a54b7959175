#include "gradus/dist/zero.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "dist/flat.h"
#include "gradus/autograd.h"
#include "gradus/autograd/raw_copy.h"
#include "gradus/ops.h"

namespace gradus::dist {

// The flat parameters and gradients of one unit and dtype/device, and this rank's shard of them.
struct ZeroRedundancyOptimizer::Buffer {
  detail::FlatLayout plan;
  Tensor params;  // [padded]: every parameter is a view of it (stage 3: while gathered)
  Tensor grads;   // [padded]: every parameter's .grad is a view of it (stage 2, 3: in backward)
  Tensor shard_param;  // leaf [shard]: what the local optimizer updates (a view of params below
                       // stage 3, its own memory at stage 3)
  Tensor shard_grad;   // [shard]: reduce-scatter output, the shard_param's .grad
  Shard shard;
  // With tensor parallelism: per element of the shard, 1 where it belongs to a tensor-parallel
  // shard, 1 / tensor ranks where to a replicated parameter (so that summing over the tensor
  // group counts it once); undefined without.
  Tensor norm_weights;
  // Stage 3: whether params holds the whole values, the all-gather in flight, and whether the
  // shard changed since the last gather (the next one then bumps the parameters' version, so
  // that caches keyed on it, such as autocast's casts, see new weights).
  bool gathered = true;
  WorkPtr gathering;
  bool stale = false;
  // Gathered in ZeroOptions::gather_dtype: params holds the shards' values rounded to it; the
  // narrow shard sent and the narrow whole received while the gather is in flight.
  bool rounded = false;
  Tensor narrow_shard, narrow_whole;
  // Stages 2, 3: the reduce-scatter in flight and where it lands.
  WorkPtr reducing;
  Tensor reduced;
  Tensor narrow_grads;  // the flat gradient cast to ZeroOptions::reduce_dtype, while reduced
};

namespace {

std::vector<std::vector<size_t>> checked_units(std::vector<std::vector<size_t>> units,
                                               size_t num_params) {
  if (units.empty()) {
    units.emplace_back(num_params);
    for (size_t i = 0; i < num_params; ++i) units[0][i] = i;
    return units;
  }
  std::vector<int> owner(num_params, -1);
  for (size_t u = 0; u < units.size(); ++u) {
    for (size_t i : units[u]) {
      GRADUS_CHECK(i < num_params, ValueError, "ZeroRedundancyOptimizer: unit ", u,
                   " names parameter ", i, " of ", num_params);
      GRADUS_CHECK(owner[i] < 0, ValueError, "ZeroRedundancyOptimizer: parameter ", i,
                   " is in units ", owner[i], " and ", u);
      owner[i] = static_cast<int>(u);
    }
  }
  for (size_t i = 0; i < num_params; ++i) {
    GRADUS_CHECK(owner[i] >= 0, ValueError, "ZeroRedundancyOptimizer: parameter ", i,
                 " is in no unit");
  }
  return units;
}

// Waits for `work` (and drops it), adding the time it took to `seconds`.
void wait_counted(WorkPtr& work, double& seconds) {
  const WorkPtr taken = std::move(work);
  const auto t0 = std::chrono::steady_clock::now();
  taken->wait();
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params,
                                                 const LocalOptimizerFactory& make_local,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 ZeroOptions options)
    : options_(std::move(options)), group_(group ? std::move(group) : default_group()) {
  GRADUS_CHECK(make_local != nullptr, ValueError,
               "ZeroRedundancyOptimizer: no factory for the local optimizer");
  GRADUS_CHECK(options_.stage >= 1 && options_.stage <= 3, ValueError,
               "ZeroRedundancyOptimizer: stage ", options_.stage, " (1, 2 or 3)");
  GRADUS_CHECK(!options_.gather_dtype || options_.stage == 3, ValueError,
               "ZeroRedundancyOptimizer: a gather dtype needs stage 3 (only it gathers units for "
               "compute); this is stage ",
               options_.stage);
  GRADUS_CHECK(!options_.reduce_dtype || options_.stage >= 2, ValueError,
               "ZeroRedundancyOptimizer: a reduce dtype needs stage 2 or 3; this is stage ",
               options_.stage);
  for (const std::optional<DType>& d : {options_.gather_dtype, options_.reduce_dtype}) {
    GRADUS_CHECK(!d || is_floating(*d), ValueError,
                 "ZeroRedundancyOptimizer: a gather or reduce dtype must be floating, got ",
                 dtype_name(*d));
  }
  add_group(params);  // validates (leaves, floating, no duplicates)
  options_.units = checked_units(std::move(options_.units), params.size());
  const int64_t world = group_->size(), rank = group_->rank();
  // A world of one's shard is the whole model: the parameters stay whole (and are the shard).
  shards_parameters_ = options_.stage == 3 && world > 1;
  NoGradGuard no_grad;
  std::vector<Tensor> shard_leaves;
  units_.resize(options_.units.size());
  for (size_t u = 0; u < options_.units.size(); ++u) {
    for (const detail::FlatLayout& plan :
         detail::plan_flat_layouts(params, options_.units[u], 0, 0, world)) {
      auto b = std::make_unique<Buffer>();
      b->plan = plan;
      b->params = detail::allocate_flat(plan);
      if (options_.stage == 1) b->grads = detail::allocate_flat(plan);
      const int64_t per = plan.padded_numel / world;
      b->shard = {rank * per, (rank + 1) * per, plan.padded_numel, plan.numel};
      for (size_t k = 0; k < plan.params.size(); ++k) {
        Tensor& p = params[plan.params[k]];
        Tensor view = detail::flat_view(b->params, plan.offsets[k], p.sizes());
        view.copy_(p.detach());
        // The parameter handle (held by the model and its users) now aliases the flat buffer.
        p.impl()->set_data(view.impl()->storage(), view.sizes(), view.strides(), view.offset(),
                           view.dtype());
      }
      b->shard_param = b->params.as_strided_raw({per}, {1}, b->params.offset() + rank * per);
      if (shards_parameters_) {
        b->shard_param = b->shard_param.clone();
        b->params.impl()->storage()->release();
        b->gathered = false;
      }
      b->shard_param.set_requires_grad(true);
      b->shard_grad = zeros({per}, {plan.dtype, plan.device});
      b->shard_param.set_grad(b->shard_grad);
      shard_leaves.push_back(b->shard_param);
      units_[u].push_back(b.get());
      buffers_.push_back(std::move(b));
    }
  }
  local_ = make_local(shard_leaves);
  GRADUS_CHECK(local_ != nullptr, ValueError,
               "ZeroRedundancyOptimizer: the factory returned no optimizer");
  attach_gradients();
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  // Collectives still in flight write into these buffers: let them land first.
  for (auto& b : buffers_) {
    try {
      if (b->gathering) b->gathering->wait();
      if (b->reducing) b->reducing->wait();
    } catch (...) {  // (a failed group: the error was or will be reported by its caller)
    }
  }
}

void ZeroRedundancyOptimizer::attach_gradients() {
  NoGradGuard no_grad;
  if (options_.stage > 1) {
    finish_gradients();  // (nothing in flight after a step; a zero_grad mid-backward drops it)
    for (auto& b : buffers_) b->shard_grad.zero_();
    return;
  }
  const std::vector<Tensor>& params = groups_[0];
  for (auto& b : buffers_) {
    b->grads.zero_();
    for (size_t k = 0; k < b->plan.params.size(); ++k) {
      const Tensor& p = params[b->plan.params[k]];
      p.set_grad(detail::flat_view(b->grads, b->plan.offsets[k], p.sizes()));
    }
  }
}

void ZeroRedundancyOptimizer::zero_grad(bool) {
  attach_gradients();
}

void ZeroRedundancyOptimizer::gather(size_t unit, bool exact) {
  if (!shards_parameters_) return;
  NoGradGuard no_grad;
  for (Buffer* b : units_.at(unit)) {
    if (exact && b->rounded && (b->gathered || b->gathering)) release_buffer(*b);
    if (b->gathered || b->gathering) continue;
    b->params.impl()->storage()->reacquire();
    const std::optional<DType> narrow = options_.gather_dtype;
    b->rounded = !exact && narrow && *narrow != b->plan.dtype;
    if (!b->rounded) {
      b->gathering = group_->all_gather(b->params, b->shard_param.detach(), "FSDP parameters");
      continue;
    }
    b->narrow_shard = b->shard_param.detach().to(*narrow);
    b->narrow_whole = empty({b->shard.padded_numel}, {*narrow, b->plan.device});
    b->gathering = group_->all_gather(b->narrow_whole, b->narrow_shard, "FSDP parameters");
  }
}

void ZeroRedundancyOptimizer::wait_gathered(size_t unit, bool exact) {
  gather(unit, exact);
  for (Buffer* b : units_.at(unit)) {
    if (!b->gathering) continue;
    wait_counted(b->gathering, stats_.gather_wait_seconds);
    if (b->rounded) {
      // Widened into the parameters' memory as the all-gather would have written it: without a
      // version bump, so a backward that saved them before they were freed still accepts them.
      copy_unversioned(b->narrow_whole, b->params);
      b->narrow_shard = b->narrow_whole = Tensor();
    }
    b->gathered = true;
    if (b->stale) {
      b->params.bump_version();
      b->stale = false;
    }
  }
}

void ZeroRedundancyOptimizer::release(size_t unit) {
  if (!shards_parameters_) return;
  for (Buffer* b : units_.at(unit)) release_buffer(*b);
}

void ZeroRedundancyOptimizer::release_buffer(Buffer& b) {
  if (b.gathering) {
    WorkPtr work = std::move(b.gathering);
    work->wait();
    b.narrow_shard = b.narrow_whole = Tensor();
    b.gathered = true;  // (what it wrote is dropped below)
  }
  if (!b.gathered) return;
  b.params.impl()->storage()->release();
  b.gathered = false;
}

void ZeroRedundancyOptimizer::adopt_gathered(size_t unit) {
  NoGradGuard no_grad;
  for (Buffer* b : units_.at(unit)) {
    // (Rounded values are never written back over the master shard.)
    if (!shards_parameters_ || !b->gathered || b->rounded) continue;
    b->shard_param.copy_(b->params.slice(0, b->shard.begin, b->shard.end));
  }
}

void ZeroRedundancyOptimizer::prepare_gradients(size_t unit) {
  if (options_.stage < 2) return;
  NoGradGuard no_grad;
  for (Buffer* b : units_.at(unit)) {
    land_reduction(*b);  // (a previous backward's, when gradients accumulate over several)
    // (A gradient accumulated outside the hooks is copied in.)
    if (!b->grads.defined()) collect_gradients(*b);
  }
}

// The flat gradient of `b` holding every parameter's .grad: a gradient that is not a view of it
// (backward made a new one) is copied in, a missing one counts as zero.
void ZeroRedundancyOptimizer::collect_gradients(Buffer& b) {
  const std::vector<Tensor>& params = groups_[0];
  if (!b.grads.defined()) b.grads = detail::allocate_flat(b.plan);
  for (size_t k = 0; k < b.plan.params.size(); ++k) {
    const Tensor& p = params[b.plan.params[k]];
    Tensor view = detail::flat_view(b.grads, b.plan.offsets[k], p.sizes());
    const Tensor g = p.grad();
    if (!g.defined()) {
      view.zero_();
      p.set_grad(view);
    } else if (g.raw_data() != view.raw_data()) {
      view.copy_(g);
      p.set_grad(view);
    }
  }
}

void ZeroRedundancyOptimizer::reduce_gradients(size_t unit) {
  if (options_.stage < 2) return;
  NoGradGuard no_grad;
  for (Buffer* b : units_.at(unit)) {
    if (b->reducing) continue;  // (started already in this backward)
    collect_gradients(*b);
    // (A world of one communicates nothing: its gradients are never rounded.)
    const DType dtype =
        group_->size() > 1 ? options_.reduce_dtype.value_or(b->plan.dtype) : b->plan.dtype;
    b->reduced = empty({b->shard.end - b->shard.begin}, {dtype, b->plan.device});
    if (dtype != b->plan.dtype) b->narrow_grads = b->grads.to(dtype);
    b->reducing =
        group_->reduce_scatter(b->reduced, dtype != b->plan.dtype ? b->narrow_grads : b->grads,
                               ReduceOp::avg, "ZeRO gradient shard");
  }
}

void ZeroRedundancyOptimizer::finish_gradients() {
  if (options_.stage < 2) return;
  NoGradGuard no_grad;
  const std::vector<Tensor>& params = groups_[0];
  for (size_t u = 0; u < units_.size(); ++u) {
    bool pending = false;
    for (const Buffer* b : units_[u]) {
      if (b->reducing) continue;
      for (size_t i : b->plan.params) pending = pending || params[i].grad().defined();
    }
    if (pending) reduce_gradients(u);
  }
  wait_reductions();
}

void ZeroRedundancyOptimizer::wait_reductions() {
  NoGradGuard no_grad;
  for (auto& b : buffers_) land_reduction(*b);
}

// Waits for the buffer's reduction in flight (if any), adds it into the gradient shard and frees
// the flat gradient with the parameters' .grad views of it.
void ZeroRedundancyOptimizer::land_reduction(Buffer& b) {
  if (!b.reducing) return;
  wait_counted(b.reducing, stats_.reduce_wait_seconds);
  b.shard_grad.add_(b.reduced);  // (widened from reduce_dtype)
  b.reduced = b.narrow_grads = Tensor();
  const std::vector<Tensor>& params = groups_[0];
  for (size_t i : b.plan.params) params[i].set_grad(Tensor());
  b.grads = Tensor();
}

void ZeroRedundancyOptimizer::step() {
  NoGradGuard no_grad;
  const std::vector<Tensor>& params = groups_[0];
  std::vector<WorkPtr> works;
  if (options_.stage == 1) {
    for (auto& b : buffers_) {
      collect_gradients(*b);
      works.push_back(
          group_->reduce_scatter(b->shard_grad, b->grads, ReduceOp::avg, "ZeRO gradient shard"));
    }
    wait_all(works);
    works.clear();
  } else {
    finish_gradients();
  }
  if (max_grad_norm_ > 0) clip_shards();
  local_->step();
  if (shards_parameters_) {
    // The whole parameters are gathered again, from the new shards, when next used.
    for (size_t u = 0; u < units_.size(); ++u) release(u);
    for (auto& b : buffers_) b->stale = true;
    return;
  }
  for (auto& b : buffers_) {
    works.push_back(group_->all_gather(b->params, b->shard_param.detach(), "ZeRO parameters"));
  }
  wait_all(works);
  for (const Tensor& p : params) p.bump_version();
}

// The global 2-norm of the averaged gradient from the shards' squared norms (one all-reduce), and
// the shards scaled by torch.nn.utils.clip_grad_norm_'s coefficient, max / (norm + 1e-6) capped
// at 1: the clipping one process applies to the whole averaged gradient.
void ZeroRedundancyOptimizer::clip_shards() {
  Tensor squares;
  for (auto& b : buffers_) {
    Tensor s = square(b->shard_grad.to(DType::f64));
    if (b->norm_weights.defined()) s = mul(s, b->norm_weights);
    s = sum(s);
    squares = squares.defined() ? add(squares, s) : s;
  }
  if (!squares.defined()) return;  // nothing trainable
  Tensor total = squares.to(Device::cpu()).reshape({1});
  group_->all_reduce(total, ReduceOp::sum, "ZeRO gradient norm")->wait();
  if (const TensorParallelModule* tensor = model_parallel_.tensor) {
    tensor->tensor_group().all_reduce(total, ReduceOp::sum, "ZeRO gradient norm")->wait();
  }
  if (ProcessGroup* stages = model_parallel_.stages) {
    stages->all_reduce(total, ReduceOp::sum, "ZeRO gradient norm (pipeline stages)")->wait();
  }
  const double norm = std::sqrt(total.item());
  GRADUS_CHECK(std::isfinite(norm), ValueError, "ZeroRedundancyOptimizer: the gradient norm is ",
               norm, ": clipping cannot scale it");
  const double coef = max_grad_norm_ / (norm + 1e-6);
  if (coef < 1.0) {
    for (auto& b : buffers_) b->shard_grad.mul_(coef);
  }
}

void ZeroRedundancyOptimizer::set_model_parallel(const ModelParallel& split) {
  model_parallel_ = {};
  if (split.stages != nullptr && split.stages->size() > 1) model_parallel_.stages = split.stages;
  if (split.tensor == nullptr || split.tensor->tensor_group().size() == 1) return;
  model_parallel_.tensor = split.tensor;
  const TensorParallelModule* split_weights = split.tensor;
  const double replicated = 1.0 / static_cast<double>(split_weights->tensor_group().size());
  const std::vector<Tensor>& params = groups_[0];
  for (auto& b : buffers_) {
    const int64_t begin = b->shard.begin, end = b->shard.end;
    std::vector<double> weights(static_cast<size_t>(end - begin), 0.0);  // (padding: 0)
    for (size_t k = 0; k < b->plan.params.size(); ++k) {
      const Tensor& p = params[b->plan.params[k]];
      const int64_t first = std::max(begin, b->plan.offsets[k]);
      const int64_t last = std::min(end, b->plan.offsets[k] + p.numel());
      const double w = split_weights->is_shard(p) ? 1.0 : replicated;
      for (int64_t i = first; i < last; ++i) weights[static_cast<size_t>(i - begin)] = w;
    }
    b->norm_weights =
        tensor(weights, {end - begin}, {.dtype = DType::f64, .device = b->plan.device});
  }
}

const char* ZeroRedundancyOptimizer::type_name() const {
  // add_group() names the optimizer in its errors before the local one exists.
  return local_ ? local_->type_name() : "ZeroRedundancyOptimizer";
}
double ZeroRedundancyOptimizer::group_lr(size_t group) const {
  return local_->group_lr(group);
}
void ZeroRedundancyOptimizer::set_group_lr(size_t group, double lr) {
  local_->set_group_lr(group, lr);
}
std::map<std::string, double> ZeroRedundancyOptimizer::group_options(size_t) const {
  const optim::OptimizerState s = local_->state_dict();
  std::map<std::string, double> out;
  for (const auto& [k, v] : s.scalars) {
    if (k.starts_with("param_groups.0.")) out[k.substr(15)] = v;
  }
  out.erase("num_params");
  return out;
}
void ZeroRedundancyOptimizer::set_group_options(size_t, const std::map<std::string, double>&) {
  throw ValueError("ZeroRedundancyOptimizer: use load_state_dict to restore its state");
}

size_t ZeroRedundancyOptimizer::num_buffers() const {
  return buffers_.size();
}
ZeroRedundancyOptimizer::Shard ZeroRedundancyOptimizer::shard(size_t buffer) const {
  return buffers_.at(buffer)->shard;
}

uint64_t ZeroRedundancyOptimizer::state_bytes() const {
  return local_->state_bytes();  // the shard's
}

optim::OptimizerState ZeroRedundancyOptimizer::state_dict() const {
  NoGradGuard no_grad;
  const optim::OptimizerState local = local_->state_dict();
  const std::vector<Tensor>& params = groups_[0];
  optim::OptimizerState full;
  full.type = local.type;
  for (const auto& [k, v] : local.scalars) {
    if (k.starts_with("param_groups.")) full.scalars[k] = v;
  }
  full.scalars["param_groups.0.num_params"] = static_cast<double>(params.size());
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const Buffer& buf = *buffers_[b];
    const std::string prefix = "state." + std::to_string(b) + ".";
    // Every rank holds the same state names and step (they step together).
    for (const auto& [k, t] : local.tensors) {
      if (k.rfind(prefix, 0) != 0) continue;
      const std::string name = k.substr(prefix.size());
      Tensor flat = zeros({buf.shard.padded_numel}, {t.dtype(), t.device()});
      group_->all_gather(flat, t.contiguous(), "ZeRO optimizer state")->wait();
      for (size_t j = 0; j < buf.plan.params.size(); ++j) {
        const size_t i = buf.plan.params[j];
        full.tensors["state." + std::to_string(i) + "." + name] =
            detail::flat_view(flat, buf.plan.offsets[j], params[i].sizes()).clone();
      }
    }
    auto step = local.scalars.find(prefix + "step");
    if (step != local.scalars.end()) {
      for (size_t i : buf.plan.params)
        full.scalars["state." + std::to_string(i) + ".step"] = step->second;
    }
  }
  return full;
}

ZeroRedundancyOptimizer::ShardedState ZeroRedundancyOptimizer::sharded_state() const {
  NoGradGuard no_grad;
  const optim::OptimizerState local = local_->state_dict();
  const std::vector<Tensor>& params = groups_[0];
  ShardedState out;
  out.scalars.type = local.type;
  for (const auto& [k, v] : local.scalars) {
    if (k.starts_with("param_groups.")) out.scalars.scalars[k] = v;
  }
  out.scalars.scalars["param_groups.0.num_params"] = static_cast<double>(params.size());
  out.state_dtypes.resize(params.size());
  out.ranges_by_rank.resize(static_cast<size_t>(group_->size()));
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const Buffer& buf = *buffers_[b];
    const std::string prefix = "state." + std::to_string(b) + ".";
    auto step = local.scalars.find(prefix + "step");
    for (size_t j = 0; j < buf.plan.params.size(); ++j) {
      const size_t i = buf.plan.params[j];
      if (step != local.scalars.end()) {
        out.scalars.scalars["state." + std::to_string(i) + ".step"] = step->second;
      }
      for (const auto& [k, t] : local.tensors) {
        if (k.starts_with(prefix)) out.state_dtypes[i][k.substr(prefix.size())] = t.dtype();
      }
      // The parameter's elements in the flat buffer, cut to each rank's shard.
      const int64_t first = buf.plan.offsets[j], last = first + params[i].numel();
      const int64_t per = buf.shard.padded_numel / group_->size();
      for (int r = 0; r < group_->size(); ++r) {
        const int64_t lo = std::max(first, r * per), hi = std::min(last, (r + 1) * per);
        if (lo < hi)
          out.ranges_by_rank[static_cast<size_t>(r)].push_back({i, lo - first, hi - first});
      }
      const int64_t lo = std::max(first, buf.shard.begin), hi = std::min(last, buf.shard.end);
      if (lo >= hi) continue;
      OwnedSlice slice;
      slice.param = i;
      slice.begin = lo - first;
      slice.end = hi - first;
      const int64_t at = lo - buf.shard.begin, until = hi - buf.shard.begin;
      slice.values = buf.shard_param.detach().slice(0, at, until);
      for (const auto& [k, t] : local.tensors) {
        if (k.starts_with(prefix)) slice.state[k.substr(prefix.size())] = t.slice(0, at, until);
      }
      out.slices.push_back(std::move(slice));
    }
  }
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const optim::OptimizerState& full) {
  NoGradGuard no_grad;
  const std::vector<Tensor>& params = groups_[0];
  GRADUS_CHECK(full.type == local_->type_name(), ValueError,
               "ZeroRedundancyOptimizer: the state is of a ", full.type, " optimizer, this is ",
               local_->type_name());
  auto n = full.scalars.find("param_groups.0.num_params");
  GRADUS_CHECK(n != full.scalars.end() && static_cast<size_t>(n->second) == params.size(),
               ValueError, "ZeroRedundancyOptimizer: the state holds ",
               n == full.scalars.end() ? -1.0 : n->second, " parameters, this optimizer ",
               params.size());
  optim::OptimizerState local;
  local.type = full.type;
  for (const auto& [k, v] : full.scalars) {
    if (k.starts_with("param_groups.")) local.scalars[k] = v;
  }
  local.scalars["param_groups.0.num_params"] = static_cast<double>(buffers_.size());
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const Buffer& buf = *buffers_[b];
    const size_t first = buf.plan.params.front();
    const std::string first_prefix = "state." + std::to_string(first) + ".";
    for (const auto& [k, t] : full.tensors) {
      if (k.rfind(first_prefix, 0) != 0) continue;
      const std::string name = k.substr(first_prefix.size());
      Tensor flat = zeros({buf.shard.padded_numel}, {buf.plan.dtype, buf.plan.device});
      for (size_t j = 0; j < buf.plan.params.size(); ++j) {
        const size_t i = buf.plan.params[j];
        const Tensor* src = nullptr;
        auto it = full.tensors.find("state." + std::to_string(i) + "." + name);
        if (it != full.tensors.end()) src = &it->second;
        GRADUS_CHECK(src != nullptr && src->numel() == params[i].numel(), ValueError,
                     "ZeroRedundancyOptimizer: state.", i, ".", name,
                     " is missing or has the wrong size");
        detail::flat_view(flat, buf.plan.offsets[j], params[i].sizes())
            .copy_(src->reshape(params[i].sizes()));
      }
      local.tensors["state." + std::to_string(b) + "." + name] =
          flat.slice(0, buf.shard.begin, buf.shard.end).clone();
    }
    auto step = full.scalars.find(first_prefix + "step");
    if (step != full.scalars.end())
      local.scalars["state." + std::to_string(b) + ".step"] = step->second;
  }
  local_->load_state_dict(local);
}

}  // namespace gradus::dist
