// docs/guide.md, "The Trainer": a model, a dataset and a task of our own trained by the library's
// training loop, data-parallel over the ranks of mpirun (DDP), under bf16 autocast, with
// checkpoints that a later run resumes.
//
//   mpirun -np 2 build/examples/example_guide_trainer CHECKPOINT_DIR [STOP_AFTER_STEPS]
//
// Prints each epoch's loss and held-out accuracy, then "accuracy=..." and "weights=..." (the sum
// of every weight, to compare runs). Run it again on the same directory and it continues from the
// newest checkpoint.
#include <gradus/gradus.h>
#include <gradus/train/train.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

using namespace gradus;

// [guide:trainer_data]
// A dataset of our own: 2-D points labelled by the ring (of three) they fall in. Example i is
// made from i alone, so every rank and every run sees the same examples.
class Rings : public data::Dataset {
 public:
  Rings(int64_t size, uint64_t seed) : size_(size), seed_(seed) {}
  int64_t size() const override { return size_; }
  data::Example get(int64_t index) const override {
    std::mt19937_64 rng(seed_ * 1000003 + static_cast<uint64_t>(index));
    const double radius = std::uniform_real_distribution<double>(0, 3)(rng);
    const double angle = std::uniform_real_distribution<double>(0, 6.283185307179586)(rng);
    return {tensor({radius * std::cos(angle), radius * std::sin(angle)}, {2}),
            tensor({std::floor(radius)}, {}, {.dtype = DType::i64})};
  }

 private:
  int64_t size_;
  uint64_t seed_;
};

// A model of our own.
class RingNet : public nn::Module {
 public:
  RingNet() {
    hidden_ = register_module("hidden", std::make_shared<nn::Linear>(2, 64));
    out_ = register_module("out", std::make_shared<nn::Linear>(64, 3));
  }
  Tensor forward(const Tensor& x) override { return (*out_)(gelu((*hidden_)(x))); }

 private:
  std::shared_ptr<nn::Linear> hidden_, out_;
};

// What a batch means (its loss) and how the model is judged (accuracy on held-out points).
class RingTask : public train::Task {
 public:
  explicit RingTask(std::shared_ptr<data::Dataset> held_out) : held_out_(std::move(held_out)) {}
  Tensor loss(nn::Module& model, const data::Example& batch) override {
    CrossEntropyOptions smoothed;
    smoothed.label_smoothing = 0.05;
    return cross_entropy(model(batch.input), batch.target, smoothed);
  }
  std::map<std::string, double> evaluate(nn::Module& model) override {
    data::DataLoader loader(held_out_, {.batch_size = 1000});
    double correct = 0;
    for (data::Example& b : loader) correct += sum(eq(argmax(model(b.input), 1), b.target)).item();
    return {{"accuracy", correct / static_cast<double>(held_out_->size())}};
  }

 private:
  std::shared_ptr<data::Dataset> held_out_;
};
// [guide:end]

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CHECKPOINT_DIR [STOP_AFTER_STEPS]\n", argv[0]);
    return 2;
  }
  // [guide:trainer]
  const dist::World& world = dist::init();  // the ranks of mpirun/srun, or a world of one
  manual_seed(1);  // the same initial weights on every rank (DDP also broadcasts rank 0's)
  auto train_set = std::make_shared<Rings>(4096, 1), held_out = std::make_shared<Rings>(1000, 2);
  // batch_size is the global batch: each rank takes its slice of every one.
  data::DataLoader loader(train_set, {.batch_size = 128,
                                      .shuffle = true,
                                      .seed = 7,
                                      .rank = world.rank,
                                      .world_size = world.size});
  train::TrainerOptions options;
  options.epochs = 4;
  options.amp = DType::bf16;  // autocast; f16 would add dynamic loss scaling
  options.max_grad_norm = 1.0;
  options.checkpoints = {.dir = argv[1], .resume = true};  // continue where a last run stopped
  options.checkpoint_every = 20;
  options.stop_after_steps = argc > 2 ? std::atoll(argv[2]) : 0;
  options.scheduler = [](optim::Optimizer& opt, int64_t total_steps, int64_t) {
    return std::make_shared<optim::CosineAnnealingLR>(opt, total_steps);
  };
  train::Trainer trainer(
      std::make_shared<RingNet>(),
      [](std::vector<Tensor> params) {
        return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions{.lr = 1e-2});
      },
      std::make_shared<RingTask>(held_out), options,
      train::make_strategy(world.size > 1 ? "ddp" : "local"));
  trainer.on_epoch = [&](const train::EpochReport& r) {
    if (world.rank == 0) {
      std::printf("epoch %lld loss %.4f accuracy %.4f\n", static_cast<long long>(r.epoch + 1),
                  r.train_loss, r.eval.at("accuracy"));
    }
  };
  const train::FitResult result = trainer.fit(loader);
  // [guide:end]
  if (result.stopped) {
    if (world.rank == 0) {
      std::printf("stopped after step %lld; checkpoint %s\n", static_cast<long long>(result.steps),
                  result.checkpoint.c_str());
    }
    return result.stop_signal != 0 ? 128 + result.stop_signal : 0;
  }
  double weights = 0;
  for (const Tensor& p : trainer.model().parameters()) weights += sum(p.to(DType::f64)).item();
  if (world.rank == 0) {
    // (A run resumed after the last epoch has nothing left to train or evaluate.)
    const double accuracy = result.last_epoch ? result.last_epoch->eval.at("accuracy") : -1;
    std::printf("accuracy=%.4f\nweights=%.17g\n", accuracy, weights);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
