// docs/guide.md, "The Trainer": the GPT split over tensor-parallel ranks, trained by the same
// Trainer (the ranks left over train data-parallel). Token windows of a repeating sequence stand
// in for text.
//
//   mpirun -np 2 build/examples/example_guide_tensor_parallel    # 1 data x 2 tensor
//   mpirun -np 4 build/examples/example_guide_tensor_parallel    # 2 data x 2 tensor
//
// Prints the training loss of each epoch, then "loss=...".
#include <gradus/gradus.h>
#include <gradus/train/train.h>

#include <cstdio>

#include "counting_windows.h"

using namespace gradus;

// [guide:tensor_parallel_task]
// The loss on this rank's slice of the vocabulary's logits (a collective over the tensor ranks).
class NextToken : public train::Task {
 public:
  explicit NextToken(std::shared_ptr<dist::TensorParallelGPT> gpt) : gpt_(std::move(gpt)) {}
  Tensor loss(nn::Module& model, const data::Example& batch) override {
    return gpt_->loss(model(batch.input), batch.target);  // model: the strategy's view of gpt_
  }
  std::map<std::string, double> evaluate(nn::Module&) override { return {}; }

 private:
  std::shared_ptr<dist::TensorParallelGPT> gpt_;
};
// [guide:end]

int main() try {
  const dist::World& world = dist::init();
  nn::GPTConfig config;
  config.vocab_size = 13;  // padded to 14 over 2 tensor ranks
  config.block_size = 16;
  config.n_layer = 2;
  config.n_head = 2;
  config.n_embd = 32;
  auto windows = std::make_shared<CountingWindows>(512, config.block_size, config.vocab_size);
  train::TrainerOptions options;
  options.epochs = 3;
  options.max_grad_norm = 1.0;  // the whole model's norm, summed over the shards
  // [guide:tensor_parallel]
  const int tensor_ranks = world.size % 2 == 0 ? 2 : 1;
  const dist::ParallelGroups groups = dist::make_parallel_groups({.tensor = tensor_ranks});
  manual_seed(0);
  auto gpt = std::make_shared<dist::TensorParallelGPT>(config, groups.tensor);  // == nn::GPT
  auto strategy = train::make_strategy(groups.layout.data > 1 ? "ddp" : "local",
                                       {.group = groups.data, .tensor_parallel = gpt});
  // Each data rank takes its rows of every batch; a replica's tensor ranks see the same rows.
  data::DataLoader loader(windows, {.batch_size = 32,
                                    .shuffle = true,
                                    .seed = 3,
                                    .rank = groups.data_rank,
                                    .world_size = groups.layout.data});
  train::Trainer trainer(
      gpt,
      [](std::vector<Tensor> params) {
        return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions{.lr = 3e-3});
      },
      std::make_shared<NextToken>(gpt), options, std::move(strategy));
  const train::FitResult result = trainer.fit(loader);
  // [guide:end]
  const double loss = result.last_epoch ? result.last_epoch->train_loss : -1;
  if (world.rank == 0) std::printf("loss=%.4f\n", loss);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
