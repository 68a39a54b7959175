// --tp/--pp/--micro-batches/--schedule for image classification: the world laid out as data x
// pipeline x tensor (dist::make_parallel_groups), the model built whole on every rank from the
// seed (so every layout starts from the one-process weights), its MLP's hidden layers split
// Megatron-style under --tp (column- then row-parallel), its layers cut into stages under --pp
// (dist::Pipeline). The run itself is the training layer's Trainer (train.cpp): these are the
// StrategyOptions it is given.
#include "train_parallel.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "gradus/dist/dist.h"
#include "gradus/gradus.h"
#include "gradus/nn/models.h"

namespace gradus::cli {

void add_model_parallel_options(CLI::App& train, TrainOptions& o) {
  train
      .add_option("--tp", o.tp,
                  "Tensor-parallel ranks: split the model over this many ranks (the MLP's hidden "
                  "layers; the GPT's attention, MLP and vocabulary) under mpirun; the ranks left "
                  "over are data-parallel")
      ->check(CLI::Range(1, 1 << 20));
  train
      .add_option("--pp", o.pp,
                  "Pipeline stages: split the model's layers over this many ranks (under mpirun)")
      ->check(CLI::Range(1, 1 << 20));
  train
      .add_option("--micro-batches", o.micro_batches,
                  "--pp: micro-batches each replica's batch is cut into")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  train.add_option("--schedule", o.schedule, "--pp: pipeline schedule")
      ->check(CLI::IsMember({"gpipe", "1f1b"}))
      ->capture_default_str();
}

std::shared_ptr<nn::Module> build_image_model(const TrainOptions& o,
                                              const dist::ParallelGroups& groups) {
  if (o.tp > 1) {
    GRADUS_CHECK(o.model == "mlp" && o.dropout == 0, ValueError,
                 "train: --tp splits the hidden layers of --model mlp (without --dropout); got "
                 "--model ",
                 o.model);
    // nn::MLP's layers, names and (from the same seed) weights, the hidden ones split.
    auto m = std::make_shared<nn::Sequential>();
    m->push_back(
        std::make_shared<dist::ColumnParallelLinear>(28 * 28, 256, true, false, groups.tensor));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<dist::RowParallelLinear>(256, 128, true, true, groups.tensor));
    m->push_back(std::make_shared<nn::ReLU>());
    m->push_back(std::make_shared<nn::Linear>(128, 10));
    return m;
  }
  if (o.dropout > 0) {
    return std::make_shared<nn::MLP>(std::vector<int64_t>{28 * 28, 256, 128, 10}, "relu",
                                     o.dropout);
  }
  return nn::make_model(o.model);
}

train::StrategyOptions image_layout_options(const TrainOptions& o,
                                            std::shared_ptr<nn::Module> model,
                                            const dist::ParallelGroups& groups, bool lead) {
  train::StrategyOptions layout{.group = groups.data};
  layout.gather_dtype = communication_dtype("--gather-dtype", o.gather_dtype, o.dist);
  layout.reduce_dtype = communication_dtype("--reduce-dtype", o.reduce_dtype, o.dist);
  if (o.pp > 1) {
    auto seq = std::dynamic_pointer_cast<nn::Sequential>(model);
    GRADUS_CHECK(seq != nullptr, ValueError, "train: --pp splits a sequence of layers; --model ",
                 o.model, " is not one");
    const int64_t local_batch = o.batch_size / groups.layout.data;
    GRADUS_CHECK(local_batch >= o.micro_batches, ValueError, "train: each replica's batch of ",
                 local_batch, " examples cannot be cut into --micro-batches ", o.micro_batches);
    layout.pipeline = std::make_shared<dist::Pipeline>(
        seq,
        dist::PipelineOptions{.micro_batches = o.micro_batches,
                              .schedule = dist::parse_schedule(o.schedule),
                              .global_row_offset = groups.data_rank * local_batch,
                              .global_rows = o.batch_size},
        groups.pipeline);
    dist::Pipeline& pipe = *layout.pipeline;
    if (o.grad_checkpoint > 0) pipe.stage().checkpoint_every(o.grad_checkpoint);
    std::fprintf(stderr,
                 "gradus train: stage %d of %d holds layers [%lld, %lld) (%lld parameters), %d "
                 "micro-batches (%s)\n",
                 pipe.stage_index(), pipe.num_stages(), static_cast<long long>(pipe.first_layer()),
                 static_cast<long long>(pipe.end_layer()),
                 static_cast<long long>(pipe.stage().num_parameters()), o.micro_batches,
                 o.schedule.c_str());
    // Batch norm inside a pipeline normalises each micro-batch with its own statistics (as
    // GPipe does), so it trains differently from one process on the whole batch: say so.
    bool has_batch_norm = false;
    for (const auto& [name, m] : seq->named_modules()) {
      has_batch_norm = has_batch_norm || dynamic_cast<nn::BatchNorm2d*>(m.get()) != nullptr;
    }
    if (lead && has_batch_norm && o.micro_batches > 1) {
      std::fprintf(stderr,
                   "gradus train: note: --model %s has batch norm, which normalises each of the "
                   "%d micro-batches with its own statistics (as GPipe does): the run differs "
                   "from one process on the whole batch\n",
                   o.model.c_str(), o.micro_batches);
    }
  }
  if (o.tp > 1) {
    // The split layers of what this rank holds (its stage's, under a pipeline).
    std::shared_ptr<nn::Module> held = model;
    if (layout.pipeline) held = layout.pipeline->stage_module();
    layout.tensor_parallel = std::make_shared<dist::TensorParallelLayers>(held, groups.tensor);
  }
  return layout;
}

}  // namespace gradus::cli
