// The training loop of the library. A Trainer holds a model spread over ranks by a Strategy, the
// optimizer the strategy built, and a Task that says what a batch means; fit() runs epochs of
// steps over a DataLoader with what a training run needs around the step:
//   * autocast (bf16 or f16) and, for f16, dynamic loss scaling (amp::GradScaler);
//   * gradient clipping to a global norm, under every strategy (Strategy::step), and gradient
//     accumulation over several batches per optimizer step;
//   * a per-step LR schedule;
//   * deferred loss reads (DeferredLosses: on a GPU the host reads the losses every 20 steps and
//     keeps the device's queue full), accounted in step order;
//   * the step captured once as a CUDA graph and replayed (StepGraph);
//   * checkpoints (every N steps and at each epoch's end), resume from the newest good one,
//     stop on SIGINT/SIGTERM/SIGHUP or after a number of steps with a checkpoint;
//   * evaluation after each epoch (Task::evaluate) and reports through callbacks;
//   * a profile of chosen steps (StepProfiler).
// A data-parallel run builds the same Trainer on every rank (collectively) with a loader that
// gives each rank its slice of the global batch (DataLoaderOptions::rank / world_size).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "gradus/data/dataloader.h"
#include "gradus/train/agreement.h"
#include "gradus/train/checkpoints.h"
#include "gradus/train/profiling.h"
#include "gradus/train/strategy.h"

namespace gradus::train {

// What a batch means and how a model is judged. A task defines output_loss (and model_input when
// the model takes something other than batch.input), or overrides loss() as a whole; only the
// former can train under a pipeline, which runs the model's forward itself, micro-batch by
// micro-batch.
class Task {
 public:
  virtual ~Task() = default;
  // The training loss of one batch (0-d, on the device), its forward pass included. Runs under
  // autocast when the Trainer has AMP on. Default: output_loss(model(model_input(batch)), ...).
  virtual Tensor loss(nn::Module& model, const data::Example& batch);
  // What the model is given for a batch (default: batch.input).
  virtual Tensor model_input(const data::Example& batch) { return batch.input; }
  // The mean loss of the model's output for some of a batch's rows against their target rows.
  // Default: a ValueError saying the task defines none (it overrides loss() instead).
  virtual Tensor output_loss(const Tensor& output, const Tensor& target);
  // Examples in a batch (what the loss averages over; samples/s counts them).
  virtual int64_t examples(const data::Example& batch) const { return batch.input.size(0); }
  // Held-out metrics after each epoch, e.g. {"loss": ..., "accuracy": ...}; none by default. The
  // model is in eval mode and gradients are off while it runs; under a pipeline it is the whole
  // pipeline (every stage calls it and gets the last stage's output).
  virtual std::map<std::string, double> evaluate(nn::Module& model) { return {}; }
};

// Classification: cross-entropy of model(model_input(batch)) [N, classes] against integer
// targets [N]. evaluate() runs the held-out set (if one is given) in batches: mean loss and
// accuracy. Every rank evaluates the whole set (the same numbers on each).
class ClassificationTask : public Task {
 public:
  explicit ClassificationTask(std::shared_ptr<data::Dataset> held_out = nullptr,
                              int64_t eval_batch_size = 500);
  Tensor output_loss(const Tensor& output, const Tensor& target) override;
  std::map<std::string, double> evaluate(nn::Module& model) override;

 private:
  std::shared_ptr<data::Dataset> held_out_;
  int64_t eval_batch_size_;
};

using SchedulerFactory = std::function<std::shared_ptr<optim::LRScheduler>(
    optim::Optimizer& optimizer, int64_t total_steps, int64_t steps_per_epoch)>;

struct TrainerOptions {
  int64_t epochs = 1;
  std::optional<DType> amp;  // bf16 or f16 autocast; f16 adds dynamic loss scaling
  double max_grad_norm = 0;  // clip the gradients' global 2-norm (0: off)
  // Gradient accumulation: batches per optimizer step. Each batch's loss is divided by it, the
  // gradients add up (DDP exchanges them in the last batch's backward only) and the optimizer
  // steps once; an epoch's batches beyond its last whole group are skipped. Steps, schedules and
  // checkpoints count optimizer steps.
  int64_t accumulate = 1;
  bool cuda_graph = false;        // capture the step once and replay it (GPU; see StepGraph)
  int64_t read_loss_every = 0;    // read losses back every N steps (0: 1 on the CPU, 20 on a GPU)
  int64_t stop_after_steps = 0;   // stop (with a checkpoint) once this many steps ran in total
  CheckpointOptions checkpoints;  // dir "" = no checkpoints
  int64_t checkpoint_every = 0;   // also every N steps (0: at each epoch's end only)
  // Also evaluate every N steps (0: at each epoch's end only); reported through on_eval. A step
  // that ends an epoch is evaluated once, as the epoch's end.
  int64_t eval_every = 0;
  // The run's configuration as text: stored in each checkpoint, compared on resume.
  std::string config;
  // Settings every data rank must share, besides what the Trainer checks itself (the model's
  // signature, these options, the data's size, the resume step): compared over the ranks before
  // the first collective, a difference refused on every rank by name (agreement.h).
  Settings rank_agreement;
  ConfigCheck check_config = note_config_difference;
  SchedulerFactory scheduler;  // nullptr: a constant learning rate
  // A profile of some steps (Chrome trace and summary table), written by the run's first rank.
  ProfileOptions profile;
  std::string who = "train";  // prefixes the messages
  // Ends the message of a non-finite loss (what to change).
  std::string divergence_hint = "lower the learning rate or warm it up";
};

// Right after a step, before its loss is read back.
struct BatchEnd {
  int64_t step = 0;               // optimizer steps so far, this one included
  int64_t epoch = 0;              // 0-based
  data::LoaderPosition next;      // the next batch to train on
  int64_t examples_in_epoch = 0;  // global examples trained in this epoch by this process
  double running_loss = 0;        // mean loss of the epoch's steps read back so far
};

struct StepReport {
  int64_t step = 0;      // optimizer steps so far, this one included
  int64_t epoch = 0;     // 0-based
  double loss = 0;       // the global batch's loss
  double lr = 0;         // the learning rate the step used
  int64_t examples = 0;  // in the global batch
};

struct EpochReport {
  int64_t epoch = 0;  // 0-based
  int64_t step = 0;
  double train_loss = 0;  // mean over the epoch's examples
  double lr = 0;          // of the epoch's last step
  double seconds = 0;     // training (evaluation excluded)
  double examples_per_s = 0;
  std::map<std::string, double> eval;  // Task::evaluate
};

// An evaluation between epoch ends (TrainerOptions::eval_every).
struct EvalReport {
  int64_t step = 0;
  int64_t epoch = 0;                   // 0-based
  std::map<std::string, double> eval;  // Task::evaluate
};

struct FitResult {
  int64_t steps = 0;     // optimizer steps in total (resumed ones included)
  bool stopped = false;  // by stop_after_steps or a signal, before the last epoch ended
  int stop_signal = 0;   // the signal, if one stopped it (the process should exit 128 + it)
  std::optional<EpochReport> last_epoch;  // of this process
  std::string checkpoint;                 // the last checkpoint written ("" = none)
  CheckpointTimes checkpoint_times;       // what writing them cost the loop (this rank)
};

class Trainer {
 public:
  // Collective over the strategy's ranks (Strategy::setup). `strategy` nullptr: "local".
  Trainer(std::shared_ptr<nn::Module> model, const OptimizerFactory& make_optimizer,
          std::shared_ptr<Task> task, const TrainerOptions& options = TrainerOptions(),
          std::unique_ptr<Strategy> strategy = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains for options.epochs over `loader` (each rank's slice of the global batch), resuming
  // from a checkpoint when options.checkpoints.resume says so.
  FitResult fit(data::DataLoader& loader);

  // Hooks, all optional, called on every rank: once the start is known (the steps a resumed run
  // already did), at each epoch's start, right after each step, after each step's loss is read
  // (in step order, possibly a few steps late on a GPU), and after each epoch's evaluation.
  std::function<void(int64_t steps_done)> on_start;
  std::function<void(int64_t epoch)> on_epoch_begin;
  std::function<void(const BatchEnd&)> on_batch_end;
  std::function<void(const StepReport&)> on_step;
  std::function<void(const EpochReport&)> on_epoch;
  std::function<void(const EvalReport&)> on_eval;

  nn::Module& model() { return strategy_->model(); }
  optim::Optimizer& optimizer() { return strategy_->optimizer(); }
  Strategy& strategy() { return *strategy_; }
  amp::GradScaler& scaler() { return scaler_; }
  optim::LRScheduler* scheduler() { return scheduler_.get(); }

 private:
  // One optimizer step on one batch (what a CUDA graph captures).
  Tensor train_step(const Tensor& input, const Tensor& target);
  // Forward and backward of one of `parts` batches of an optimizer step (its loss divided by
  // parts; `last`: the one whose backward exchanges the gradients). Returns the batch's loss.
  Tensor forward_backward(const data::Example& batch, int64_t parts, bool last);
  // The update after the step's batches: averaged, clipped, stepped, schedule-free.
  void optimizer_step();
  std::map<std::string, double> evaluate();

  std::shared_ptr<Task> task_;
  TrainerOptions options_;
  std::unique_ptr<Strategy> strategy_;
  amp::GradScaler scaler_;
  std::shared_ptr<optim::LRScheduler> scheduler_;
};

}  // namespace gradus::train
