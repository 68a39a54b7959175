// The data-parallel strategies and their registry (gradus/train/strategy.h).
#include "gradus/train/strategy.h"

#include <set>
#include <sstream>

#include "gradus/dist/fsdp.h"
#include "gradus/dist/module_sync.h"
#include "gradus/dist/parameter_server.h"
#include "gradus/dist/zero.h"
#include "gradus/ops.h"

namespace gradus::train {

namespace {

// Bytes of the storages under `tensors` not counted yet (`seen` remembers them).
uint64_t storage_bytes(const std::vector<Tensor>& tensors, std::set<const StorageImpl*>& seen) {
  uint64_t bytes = 0;
  for (const Tensor& t : tensors) {
    if (!t.defined() || t.impl() == nullptr) continue;
    const Storage& storage = t.impl()->storage();
    // (A released storage, FSDP's whole parameters between uses, holds no memory.)
    if (storage && storage->is_resident() && seen.insert(storage.get()).second) {
      bytes += storage->nbytes();
    }
  }
  return bytes;
}

std::vector<Tensor> gradients_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  return grads;
}

}  // namespace

Strategy::Strategy(const StrategyOptions& options)
    : group_(options.group ? options.group : dist::default_group()), options_(options) {}

nn::Module& Strategy::model() const {
  GRADUS_CHECK(model_ != nullptr, ValueError, "train: strategy ", name(), " used before setup()");
  return *model_;
}

dist::ModelParallel Strategy::model_parallel() const {
  return {.tensor = tensor_parallel(), .stages = pipeline() ? &pipeline()->group() : nullptr};
}

dist::ProcessGroup& Strategy::run_group() const {
  return model_parallel().split() ? *dist::default_group() : *group_;
}

std::shared_ptr<nn::Module> Strategy::held_part(std::shared_ptr<nn::Module> model) const {
  if (pipeline() == nullptr) return model;
  return std::shared_ptr<nn::Module>(std::move(model), &pipeline()->stage());
}

std::vector<Tensor> Strategy::updated_parameters() const {
  std::vector<Tensor> params = model().trainable_parameters();
  if (pipeline() != nullptr) {
    std::erase_if(params, [this](const Tensor& p) { return pipeline()->is_tied_copy(p); });
  }
  return params;
}

std::unique_ptr<optim::Optimizer> Strategy::make_optimizer(const OptimizerFactory& make,
                                                           std::vector<Tensor> params) const {
  if (params.empty() && pipeline() != nullptr) {
    Tensor placeholder = zeros({1});
    placeholder.set_requires_grad(true);
    params.push_back(placeholder);
  }
  return make(std::move(params));
}

nn::Module& Strategy::inference_module() {
  if (pipeline() == nullptr) return model();
  if (pipeline_module_ == nullptr) {
    pipeline_module_ = std::make_unique<dist::PipelineModule>(*pipeline());
  }
  pipeline_module_->train(model().is_training());
  return *pipeline_module_;
}

optim::Optimizer& Strategy::optimizer() const {
  GRADUS_CHECK(optimizer_ != nullptr, ValueError, "train: strategy ", name(),
               " used before setup()");
  return *optimizer_;
}

MemoryFootprint Strategy::memory_footprint() const {
  std::set<const StorageImpl*> seen;
  MemoryFootprint m;
  const std::vector<Tensor> params = model().parameters();
  m.parameter_bytes = storage_bytes(params, seen);
  m.parameter_bytes += storage_bytes(optimizer().all_params(), seen);
  m.parameter_bytes += storage_bytes(parameter_buffers(), seen);
  m.gradient_bytes = storage_bytes(gradients_of(params), seen);
  m.gradient_bytes += storage_bytes(gradients_of(optimizer().all_params()), seen);
  m.gradient_bytes += storage_bytes(gradient_buffers(), seen);
  m.optimizer_state_bytes = optimizer().state_bytes();
  return m;
}

// The gradients are averaged by the time this runs (local: nothing to average; DDP: during
// backward), so clipping them here clips what one process would.
void Strategy::step(amp::GradScaler& scaler, double max_grad_norm) {
  GRADUS_CHECK(!scaler.is_enabled() || caps().loss_scaling, ValueError, "train: strategy ", name(),
               " does not support loss scaling (--amp f16)");
  if (max_grad_norm > 0) {
    scaler.unscale_(optimizer());  // the norm of the true gradients (nothing when disabled)
    dist::clip_grad_norm_model_parallel(updated_parameters(), max_grad_norm, model_parallel());
  }
  scaler.step(optimizer());  // the plain optimizer step when the scaler is disabled
}

namespace {

// One process (or ranks that each train alone): the model and its optimizer as they are.
class LocalStrategy final : public Strategy {
 public:
  using Strategy::Strategy;
  const char* name() const override { return "local"; }
  StrategyCaps caps() const override {
    return {.loss_scaling = true, .graph_capture = true, .sharded_optimizer_state = false};
  }
  void setup(std::shared_ptr<nn::Module> model, const OptimizerFactory& make) override {
    model_ = held_part(std::move(model));
    optimizer_ = make_optimizer(make, updated_parameters());
  }
  nn::Module& module() override { return model(); }
};

// DistributedDataParallel: gradient buckets all-reduced during backward. Under a pipeline,
// whose backward runs per micro-batch outside DDP's forward, a stage's gradients are averaged in
// one bucket after it.
class DdpStrategy final : public Strategy {
 public:
  using Strategy::Strategy;
  const char* name() const override { return "ddp"; }
  StrategyCaps caps() const override {
    return {.loss_scaling = true, .graph_capture = false, .sharded_optimizer_state = false};
  }
  void setup(std::shared_ptr<nn::Module> model, const OptimizerFactory& make) override {
    model_ = held_part(std::move(model));
    if (pipeline() != nullptr) {
      dist::broadcast_module_state(*model_, *group_, 0);
    } else {
      dist::DDPOptions ddp = options_.ddp;
      ddp.group = group_;
      wrapper_ = std::make_shared<dist::DistributedDataParallel>(model_, ddp);  // broadcasts
    }
    optimizer_ = make_optimizer(make, updated_parameters());
  }
  nn::Module& module() override { return wrapper_ ? *wrapper_ : model(); }
  void before_forward() override {
    if (wrapper_ == nullptr && model().is_training()) dist::broadcast_buffers(model(), *group_, 0);
  }
  void set_gradient_sync(bool on) override {
    if (wrapper_ == nullptr || on) {
      no_sync_.reset();
    } else if (!no_sync_) {
      no_sync_.emplace(*wrapper_);
    }
  }
  void step(amp::GradScaler& scaler, double max_grad_norm) override {
    if (wrapper_ == nullptr) dist::average_gradients(updated_parameters(), *group_);
    Strategy::step(scaler, max_grad_norm);
  }

 private:
  std::shared_ptr<dist::DistributedDataParallel> wrapper_;
  std::optional<dist::DistributedDataParallel::NoSync> no_sync_;  // engaged: backward keeps local
};

// A parameter server on data rank 0: gradients in, parameters and buffers out, every step.
class ParameterServerStrategy final : public Strategy {
 public:
  using Strategy::Strategy;
  const char* name() const override { return "ps"; }
  StrategyCaps caps() const override { return {}; }
  void setup(std::shared_ptr<nn::Module> model, const OptimizerFactory& make) override {
    model_ = held_part(std::move(model));
    optimizer_ = make_optimizer(make, updated_parameters());
    server_ = std::make_unique<dist::ParameterServer>(
        model_, *optimizer_,
        dist::ParameterServerOptions{
            .server = 0, .group = group_, .model_parallel = model_parallel()});
  }
  nn::Module& module() override { return model(); }
  void step(amp::GradScaler& scaler, double max_grad_norm) override {
    GRADUS_CHECK(!scaler.is_enabled(), ValueError,
                 "train: strategy ps does not support loss scaling (--amp f16)");
    server_->step(max_grad_norm);  // averaged and clipped on the server
  }

 private:
  std::unique_ptr<dist::ParameterServer> server_;
};

// ZeRO: gradients reduce-scattered, each rank updates its shard of the parameters and holds that
// shard's optimizer state. Stage 1 all-gathers the parameters after the step; stage 2 frees each
// unit's whole gradient as soon as it is reduce-scattered during backward; stage 3 (FSDP) holds
// only its parameter shards between steps and gathers each unit's around its use
// (dist::FullyShard).
template <int Stage>
class ZeroStrategy final : public Strategy {
 public:
  using Strategy::Strategy;
  const char* name() const override { return Stage == 1 ? "zero1" : Stage == 2 ? "zero2" : "fsdp"; }
  StrategyCaps caps() const override {
    return {.loss_scaling = false, .graph_capture = false, .sharded_optimizer_state = true};
  }
  void setup(std::shared_ptr<nn::Module> model, const OptimizerFactory& make) override {
    GRADUS_CHECK(Stage == 1 || pipeline() == nullptr, ValueError, "train: strategy ", name(),
                 " does not run under pipeline parallelism (--pp): use zero1 or ddp");
    model_ = held_part(std::move(model));
    dist::broadcast_module_state(*model_, *group_, 0);
    // The trainable parameters only: a frozen one is neither in the shards nor updated (an
    // optimizer over it would still apply weight decay to its zero gradient).
    const std::vector<Tensor> params = updated_parameters();
    dist::ShardUnits units;
    dist::ZeroOptions zero_options{.stage = Stage,
                                   .units = {},
                                   .gather_dtype = options_.gather_dtype,
                                   .reduce_dtype = options_.reduce_dtype};
    if (Stage > 1) {
      units = dist::plan_shard_units(*model_, params, options_.shard_units);
      zero_options.units = units.params;
    }
    auto zero = std::make_unique<dist::ZeroRedundancyOptimizer>(params, make, group_, zero_options);
    zero_ = zero.get();
    zero_->set_model_parallel(model_parallel());
    optimizer_ = std::move(zero);
    if (Stage > 1) {
      fully_shard_ = std::make_unique<dist::FullyShard>(
          *model_, *zero_, std::move(units),
          dist::FullyShardOptions{.reshard_after_forward = Stage == 3,
                                  .prefetch = options_.fsdp.prefetch});
    }
  }
  nn::Module& module() override { return model(); }
  void before_forward() override {
    if (model().is_training()) dist::broadcast_buffers(model(), *group_, 0);
  }
  void step(amp::GradScaler& scaler, double max_grad_norm) override {
    GRADUS_CHECK(!scaler.is_enabled(), ValueError, "train: strategy ", name(),
                 " does not support loss scaling (--amp f16)");
    // Clipped inside the step, on the averaged shards (a global norm over them).
    zero_->set_max_grad_norm(max_grad_norm);
    zero_->step();
  }
  FullParameters full_parameters() override {
    if (Stage < 3) return {};
    fully_shard_->gather_all();
    return FullParameters([this] { fully_shard_->release_all(/*adopt_writes=*/true); });
  }
  std::vector<std::vector<Tensor>> parameter_parts() const override {
    if (Stage < 3) return Strategy::parameter_parts();
    std::vector<std::vector<Tensor>> parts;
    for (size_t u = 0; u < fully_shard_->num_units(); ++u) {
      parts.push_back(fully_shard_->unit_parameters(u));
    }
    return parts;
  }
  FullParameters full_parameters(size_t part) override {
    if (Stage < 3) return {};
    fully_shard_->gather_unit(part);
    return FullParameters(
        [this, part] { fully_shard_->release_unit(part, /*adopt_writes=*/true); });
  }

 protected:
  // The reduce-scattered gradient shard the local optimizer reads (besides the flat gradient
  // that backward writes, the parameters' .grad), and the parameter shard it updates (a view of
  // the whole parameters below stage 3).
  std::vector<Tensor> gradient_buffers() const override {
    return gradients_of(zero_->local().all_params());
  }
  std::vector<Tensor> parameter_buffers() const override { return zero_->local().all_params(); }

 private:
  dist::ZeroRedundancyOptimizer* zero_ = nullptr;  // optimizer_, typed
  std::unique_ptr<dist::FullyShard> fully_shard_;  // stages 2 and 3
};

template <typename S>
std::unique_ptr<Strategy> make(const StrategyOptions& options) {
  return std::make_unique<S>(options);
}

}  // namespace

const std::vector<StrategyInfo>& strategies() {
  static const std::vector<StrategyInfo> registry = {
      {"local", "one replica: the model and its optimizer as they are", make<LocalStrategy>},
      {"ddp", "replicas; gradient buckets all-reduced during backward", make<DdpStrategy>},
      {"ps", "replicas; a parameter server on rank 0 averages and steps",
       make<ParameterServerStrategy>},
      {"zero1", "replicas; gradients reduce-scattered, optimizer state sharded (ZeRO-1)",
       make<ZeroStrategy<1>>},
      {"zero2", "replicas; gradients and optimizer state sharded, reduced per block (ZeRO-2)",
       make<ZeroStrategy<2>>},
      {"fsdp", "parameters, gradients and optimizer state sharded, gathered per block (ZeRO-3)",
       make<ZeroStrategy<3>>},
  };
  return registry;
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, StrategyOptions options) {
  std::ostringstream names;
  for (const StrategyInfo& s : strategies()) {
    if (name != s.name) continue;
    std::unique_ptr<Strategy> strategy = s.make(options);
    GRADUS_CHECK((!options.gather_dtype && !options.reduce_dtype) ||
                     strategy->caps().sharded_optimizer_state,
                 ValueError, "train: strategy ", name,
                 " has no sharded communication whose dtype a gather or reduce dtype could set "
                 "(zero2, fsdp)");
    return strategy;
    names << (names.tellp() > 0 ? ", " : "") << s.name;
  }
  throw ValueError("train: no strategy '" + name + "' (registered: " + names.str() + ")");
}

}  // namespace gradus::train
