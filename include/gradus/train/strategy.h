// How a model and its optimizer are spread over the data-parallel ranks: one interface, one
// registry (gradus::train, the training layer above nn / optim / amp / dist).
//
//   auto strategy = train::make_strategy("fsdp");  // "local", "ddp", "ps", "zero1", "zero2",
//   "fsdp" strategy->setup(model, [](std::vector<Tensor> p) { return
//   std::make_unique<optim::Adam>(p); }); for (...) {
//     strategy->optimizer().zero_grad();
//     strategy->before_forward();
//     Tensor loss = cross_entropy(strategy->module()(x), y);  // x: this rank's share of the batch
//     scaler.scale(loss).backward();
//     strategy->step(scaler, /*max_grad_norm=*/1.0);         // averaged, clipped, one update
//     scaler.update();
//   }
//
// Every strategy ends each step with the parameters one process would have after the same
// global batch (tests/dist/strategies_test.cpp checks each registered one against it). What sets
// them apart is what crosses the network and what each rank holds: DDP all-reduces gradient
// buckets during backward, the parameter server sends every gradient to one rank and the new
// parameters back, ZeRO-1 reduce-scatters the gradients and shards the optimizer state, ZeRO-2
// also frees each block's whole gradient once reduce-scattered during backward, FSDP (ZeRO-3)
// also shards the parameters and gathers each block's just before it runs. The
// optimizer's state_dict() is the whole (unsharded) state under every strategy (collective where
// it is sharded), so a checkpoint written under one resumes under any other.
//
// Adding a strategy: one class deriving from Strategy and one row in the registry
// (src/train/strategy.cpp).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradus/amp/grad_scaler.h"
#include "gradus/dist/ddp.h"
#include "gradus/dist/fsdp.h"
#include "gradus/dist/pipeline.h"
#include "gradus/dist/process_group.h"
#include "gradus/dist/tensor_parallel.h"
#include "gradus/nn/module.h"
#include "gradus/optim/optimizer.h"
#include "gradus/train/full_parameters.h"

namespace gradus::train {

// What a strategy supports; the caller refuses the rest before training, naming the option.
struct StrategyCaps {
  // f16 loss scaling (amp::GradScaler): its skip decision needs the same gradients on every rank
  // before the step, which averaging before the step gives.
  bool loss_scaling = false;
  // The whole step in a CUDA graph: no host exchanges inside it.
  bool graph_capture = false;
  // The optimizer state is sharded over the data ranks (its state_dict() is a collective).
  bool sharded_optimizer_state = false;
};

// Builds an optimizer over the parameters this rank updates (all of them, or its shard).
using OptimizerFactory =
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> parameters)>;

struct StrategyOptions {
  // The data-parallel ranks (the world, or a layout's data group); nullptr: dist::default_group(),
  // a world of one when dist::init was not called.
  std::shared_ptr<dist::ProcessGroup> group = nullptr;
  dist::DDPOptions ddp = {};  // bucket sizes and overlap ("ddp"; its group is the one above)
  // Prefetching ("zero2", "fsdp"; whether to free after forward is the strategy's stage).
  dist::FullyShardOptions fsdp = {};
  // The modules whose parameters are gathered and reduced together ("zero2", "fsdp"; modules of
  // the model given to setup). Empty: each block of the model's ModuleLists and Sequentials
  // (dist::plan_shard_units).
  std::vector<nn::Module*> shard_units = {};
  // Mixed precision of the sharded strategies' communication (dist::ZeroOptions): the dtype
  // "fsdp" gathers parameters in for compute, and the dtype "zero2" and "fsdp" reduce-scatter
  // gradients in. Unset: the parameters' dtype. Refused by the other strategies.
  std::optional<DType> gather_dtype = std::nullopt;
  std::optional<DType> reduce_dtype = std::nullopt;
  // The model when tensor parallelism splits it inside each data replica (e.g.
  // dist::TensorParallelGPT, the same object as the model given to setup, or a
  // dist::TensorParallelLayers view of it). Gradient clipping then sums the shards' squared norms
  // over its tensor group and counts the replicated parameters once, as one process clips; the
  // Trainer's checkpoints hold the one-process model and optimizer state; stops are agreed over
  // the whole world.
  std::shared_ptr<dist::TensorParallelModule> tensor_parallel = nullptr;
  // The pipeline when pipeline parallelism cuts each data replica into stages (a dist::Pipeline
  // built over the model given to setup): the strategy holds this stage's layers, the Trainer
  // runs each batch through Pipeline::train_step, clipping adds the stages' norms, checkpoints
  // hold the whole model (gathered over the stages), stops are agreed over the whole world.
  // "ddp" then averages a stage's gradients in one bucket after the pipeline's backward (DDP's
  // hooks would fire once per micro-batch).
  std::shared_ptr<dist::Pipeline> pipeline = nullptr;
};

// What one rank holds between training steps, in bytes of tensor storage (each storage counted
// once, so a flat buffer that parameters are views of counts once, padding included): the
// parameters, their gradients (with the strategy's own gradient buffers: DDP's buckets, ZeRO's
// shards) and the optimizer state.
struct MemoryFootprint {
  uint64_t parameter_bytes = 0;
  uint64_t gradient_bytes = 0;
  uint64_t optimizer_state_bytes = 0;
};

class Strategy {
 public:
  explicit Strategy(const StrategyOptions& options);  // (abstract: made through the registry)
  virtual ~Strategy() = default;
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  // The registry name ("local", "ddp", "ps", "zero1", "zero2", "fsdp").
  virtual const char* name() const = 0;
  virtual StrategyCaps caps() const = 0;
  // Takes the model (built the same way on every rank; its trainable parameters, this stage's
  // under a pipeline, are what the optimizer gets) and makes the optimizer. Collective over the
  // data ranks: afterwards they all hold data rank 0's parameters and buffers (the server's, for
  // "ps").
  virtual void setup(std::shared_ptr<nn::Module> model, const OptimizerFactory& make_optimizer) = 0;
  // What the forward pass runs: the model, or its wrapper (DDP).
  virtual nn::Module& module() = 0;
  // The model itself, or under a pipeline this stage's layers (state_dict() names are the
  // one-process names).
  nn::Module& model() const;
  // What evaluation runs: the model, or under a pipeline the whole pipeline as one module
  // (dist::PipelineModule: every stage gets the last stage's output).
  nn::Module& inference_module();
  optim::Optimizer& optimizer() const;
  // Before each training forward: buffers follow data rank 0 where the strategy needs it.
  virtual void before_forward() {}
  // Whether the coming backward exchanges gradients: off for all but the last batch of an
  // accumulated step (DDP then skips its all-reduce; the others exchange in step() only).
  virtual void set_gradient_sync(bool on) {}
  // After backward: the gradients averaged over the data ranks, clipped to a global 2-norm of
  // max_grad_norm when it is > 0 (the averaged gradient's norm, as one process would clip), and
  // one optimizer update, skipped by an enabled scaler when they overflowed
  // (caps().loss_scaling; ValueError otherwise).
  virtual void step(amp::GradScaler& scaler, double max_grad_norm = 0);
  dist::ProcessGroup& group() const { return *group_; }
  // The model's tensor-parallel view (nullptr unless StrategyOptions::tensor_parallel).
  dist::TensorParallelModule* tensor_parallel() const { return options_.tensor_parallel.get(); }
  // The pipeline (nullptr unless StrategyOptions::pipeline).
  dist::Pipeline* pipeline() const { return options_.pipeline.get(); }
  // What this rank holds now (call it between steps: after step(), before the next zero_grad).
  MemoryFootprint memory_footprint() const;
  // The model's whole parameters while the result lives (train/full_parameters.h): what reading
  // or writing them outside the training step needs (checkpoints, --save). Collective under
  // "fsdp"; nothing to do under the others.
  virtual FullParameters full_parameters() { return {}; }
  // The model's parameters in the parts full_parameters(part) gathers one at a time (fsdp: its
  // units, the root first; the others: one part of every parameter), so that what reads them all
  // (train::save_model) never holds the whole model at once.
  virtual std::vector<std::vector<Tensor>> parameter_parts() const {
    return {model().parameters()};
  }
  virtual FullParameters full_parameters(size_t part) { return full_parameters(); }
  // How each replica is spread over ranks (what gradient clipping needs).
  dist::ModelParallel model_parallel() const;
  // Every rank that trains this model: the data ranks, and with tensor or pipeline parallelism
  // the world (each replica's other ranks too). Stops, resumes and settings are agreed over it.
  dist::ProcessGroup& run_group() const;

 protected:
  // Gradient storage the strategy holds beyond its parameters' and optimizer's .grad (ZeRO's
  // reduce-scattered shards): memory_footprint() counts it as gradient bytes.
  virtual std::vector<Tensor> gradient_buffers() const { return {}; }
  // Parameter storage beyond the model's (FSDP's shards): counted as parameter bytes.
  virtual std::vector<Tensor> parameter_buffers() const { return {}; }
  // What this rank holds of `model`: the model, or under a pipeline its stage's layers (kept
  // alive by the whole model they belong to).
  std::shared_ptr<nn::Module> held_part(std::shared_ptr<nn::Module> model) const;
  // The parameters this rank updates: the held part's trainable ones, less a pipeline's copies
  // of weights another stage owns (dist::Pipeline::is_tied_copy).
  std::vector<Tensor> updated_parameters() const;
  // make(params), or for a pipeline stage without trainable parameters (a stage of activations)
  // an optimizer of the same kind over one placeholder that never gets a gradient, so the
  // learning rate, the schedule and checkpoints work on every stage alike.
  std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerFactory& make,
                                                   std::vector<Tensor> params) const;

  std::shared_ptr<dist::ProcessGroup> group_;
  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  StrategyOptions options_;
  std::unique_ptr<dist::PipelineModule> pipeline_module_;
};

struct StrategyInfo {
  const char* name;
  const char* description;  // one line, for --help and errors
  std::function<std::unique_ptr<Strategy>(const StrategyOptions&)> make;
};
// Every strategy, in the order --help lists them.
const std::vector<StrategyInfo>& strategies();
// The strategy registered under `name`; ValueError naming the registered ones otherwise.
std::unique_ptr<Strategy> make_strategy(const std::string& name, StrategyOptions options = {});

}  // namespace gradus::train
