// docs/guide.md, "The Trainer": the GPT cut into pipeline stages, trained by the same Trainer (the
// ranks left over train data-parallel). Token windows of a repeating sequence stand in for text.
//
//   mpirun -np 2 build/examples/example_guide_pipeline    # 2 stages
//   mpirun -np 4 build/examples/example_guide_pipeline    # 2 data x 2 stages
//
// Prints the training loss of each epoch, then "loss=...".
#include <gradus/gradus.h>
#include <gradus/train/train.h>

#include <cstdio>

#include "counting_windows.h"

using namespace gradus;

// [guide:pipeline_task]
// Under a pipeline the Trainer runs the model's forward itself, micro-batch by micro-batch: a
// task says what the model is given (model_input; batch.input by default) and the loss of its
// output for some of the batch's rows.
class NextToken : public train::Task {
 public:
  Tensor output_loss(const Tensor& logits, const Tensor& target) override {
    return cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
  }
};
// [guide:end]

int main() try {
  const dist::World& world = dist::init();
  nn::GPTConfig config;
  config.vocab_size = 13;
  config.block_size = 16;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 32;
  auto windows = std::make_shared<CountingWindows>(512, config.block_size, config.vocab_size);
  train::TrainerOptions options;
  options.epochs = 3;
  options.max_grad_norm = 1.0;  // the whole model's norm, summed over the stages
  // [guide:pipeline]
  const int stages = world.size % 2 == 0 ? 2 : 1;
  const dist::ParallelGroups groups = dist::make_parallel_groups({.pipeline = stages});
  const int64_t batch = 32, rows = batch / groups.layout.data;
  manual_seed(0);
  nn::GPT gpt(config);
  // The GPT as layers (embeddings, blocks, final LayerNorm, tied head), cut into stages; state
  // names stay the GPT's, and the head's copy of the embedding is kept in step with stage 0's.
  const nn::GPTLayers layers = nn::gpt_layers(gpt);
  auto pipeline = std::make_shared<dist::Pipeline>(
      layers.layers,
      dist::PipelineOptions{.micro_batches = 4,
                            .global_row_offset = groups.data_rank * rows,
                            .global_rows = batch,
                            .layer_paths = layers.paths},
      groups.pipeline);
  auto strategy = train::make_strategy(groups.layout.data > 1 ? "ddp" : "local",
                                       {.group = groups.data, .pipeline = pipeline});
  data::DataLoader loader(windows, {.batch_size = batch,
                                    .shuffle = true,
                                    .seed = 3,
                                    .rank = groups.data_rank,
                                    .world_size = groups.layout.data});
  train::Trainer trainer(
      layers.layers,
      [](std::vector<Tensor> params) {
        return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions{.lr = 3e-3});
      },
      std::make_shared<NextToken>(), options, std::move(strategy));
  const train::FitResult result = trainer.fit(loader);
  // [guide:end]
  const double loss = result.last_epoch ? result.last_epoch->train_loss : -1;
  if (world.rank == 0) std::printf("loss=%.4f\n", loss);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
