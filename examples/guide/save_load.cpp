// docs/guide.md, "Saving and loading": weights as safetensors, and checkpoints a run resumes from.
//
//   build/examples/example_guide_save_load [train examples=2000] [data dir]
//
// Trains briefly with checkpoints, "crashes", resumes from the newest checkpoint in a second
// model and checks that the resumed run ends with exactly the weights of an uninterrupted one.
#include <gradus/gradus.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

using namespace gradus;

namespace {

std::shared_ptr<nn::Module> make_mlp() {
  return nn::make_model("mlp");  // 784-256-128-10, the CLI's --model mlp
}

// [guide:checkpoint]
// Trains for `epochs`, checkpointing every `every` steps into `dir` and resuming from the newest
// good checkpoint there if any. stop_after > 0 simulates a crash after that many steps.
void train(nn::Module& model, const std::shared_ptr<data::TensorDataset>& set,
           const std::string& dir, int epochs, int64_t every, int64_t stop_after = 0) {
  optim::SGD optimizer(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::StepLR schedule(optimizer, /*step_size=*/100, /*gamma=*/0.5);
  data::DataLoader loader(set, {.batch_size = 64, .shuffle = true, .seed = 1});
  int64_t step = 0;
  if (const std::optional<std::string> path = io::latest_checkpoint(dir)) {
    const io::TrainingState state = io::load_checkpoint(*path);  // checksums verified
    // Weights, momentum buffers, the schedule and the random state, in place.
    io::restore_training_state(state, model, &optimizer, &schedule);
    loader.set_position({state.epoch, state.batch_index});  // the next batch to train on
    step = state.step;
    std::printf("resumed from %s (step %lld)\n", path->c_str(), static_cast<long long>(step));
  }
  while (loader.epoch() < epochs) {
    for (data::Example& batch : loader) {
      optimizer.zero_grad();
      cross_entropy(model(batch.input), batch.target).backward();
      optimizer.step();
      schedule.step();
      if (++step % every == 0) {
        io::TrainingState state = io::capture_training_state(model, &optimizer, step, &schedule);
        state.epoch = loader.position().epoch;  // where the data loader is
        state.batch_index = loader.position().batch;
        io::save_checkpoint(dir, step, state, /*keep_last_k=*/2);  // atomic; old ones pruned
      }
      if (step == stop_after) return;
    }
  }
}
// [guide:end]

}  // namespace

int main(int argc, char** argv) try {
  const int64_t limit = argc > 1 ? std::atoll(argv[1]) : 2000;
  const std::string data_dir = argc > 2 ? argv[2] : data::kDefaultFashionMnistDir;
  const auto set = data::load_fashion_mnist(data_dir, true, limit);
  const std::filesystem::path tmp =
      std::filesystem::temp_directory_path() / "gradus_guide_save_load";
  std::filesystem::remove_all(tmp);
  const std::string run_a = tmp / "a", run_b = tmp / "b";

  // One run without interruption, one that stops after 20 steps and resumes in a fresh process
  // (here: a fresh model; the checkpoint carries everything else).
  manual_seed(0);
  auto uninterrupted = make_mlp();
  train(*uninterrupted, set, run_a, /*epochs=*/2, /*every=*/10);
  manual_seed(0);
  auto crashed = make_mlp();
  train(*crashed, set, run_b, 2, 10, /*stop_after=*/25);
  auto resumed = make_mlp();  // different initial weights: the checkpoint replaces them
  train(*resumed, set, run_b, 2, 10);

  // [guide:weights]
  io::save_module(*resumed, tmp / "mlp.safetensors");  // PyTorch state_dict names
  auto reloaded = make_mlp();
  io::load_module(*reloaded, tmp / "mlp.safetensors");  // strict: names and shapes must match
  // [guide:end]

  bool same = true;
  const nn::StateDict a = uninterrupted->state_dict(), b = reloaded->state_dict();
  for (const auto& [name, t] : a) {
    same = same && all(eq(t, b.at(name))).item() != 0.0;
  }
  std::printf("resumed run %s the uninterrupted one bit for bit\n",
              same ? "matches" : "DIFFERS FROM");
  std::filesystem::remove_all(tmp);
  return same ? 0 : 1;
} catch (const gradus::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
