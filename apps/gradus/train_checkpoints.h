// gradus train's checkpoints: the writer, where a run starts (--resume), and the stop signals
// that end a run with a checkpoint (train.cpp, docs/reliability.md).
#pragma once

#include <csignal>
#include <cstdint>
#include <string>

#include "commands.h"
#include "gradus/gradus.h"
#include "gradus/io/io.h"
#include "run_state.h"

namespace gradus::cli {

// SIGINT/SIGTERM/SIGHUP while checkpointing is on: finish the current step, write a checkpoint,
// exit with 128 + the signal. install_stop_handlers() routes them to g_stop_signal.
extern volatile std::sig_atomic_t g_stop_signal;
void install_stop_handlers();
// After a step of a data-parallel run (collective over the data ranks): the global batch's loss,
// the mean of the ranks' shares, and a stop request on any rank made every rank's (g_stop_signal),
// so all ranks stop after this same step. A read and one exchange every step.
double agree_on_step(dist::ProcessGroup& group, const Tensor& loss);

// Writes checkpoints of one run; skips a save that would repeat the last one exactly.
class Checkpointer {
 public:
  Checkpointer(const TrainOptions& o, nn::Module& model, optim::Optimizer& optimizer,
               optim::LRScheduler* scheduler, const amp::GradScaler& scaler, std::string config,
               bool writer)
      : o_(o),
        model_(model),
        optimizer_(optimizer),
        scheduler_(scheduler),
        scaler_(scaler),
        config_(std::move(config)),
        writer_(writer) {}

  bool enabled() const { return !o_.checkpoint_dir.empty(); }

  // The state after `step` optimizer steps, with the loader at `next` (the next batch to train
  // on) and the running loss of the epoch in progress.
  std::string save(int64_t step, data::LoaderPosition next, const EpochProgress& progress) {
    if (!enabled()) return {};
    if (step == last_step_ && next == last_position_) return last_path_;
    // A sharded optimizer's state_dict() gathers (a collective: every rank is here) the state one
    // unsharded optimizer would have, so the checkpoint resumes at any world size.
    io::TrainingState s = io::capture_training_state(model_, &optimizer_, step, scheduler_);
    if (scaler_.is_enabled()) s.scaler = scaler_.state_dict();
    last_step_ = step;
    last_position_ = next;
    if (!writer_) return {};  // rank 0 writes for the world
    s.epoch = next.epoch;
    s.batch_index = next.batch;
    s.config = config_;
    store_epoch_progress(s, progress);
    last_path_ = io::save_checkpoint(o_.checkpoint_dir, step, s, o_.keep_checkpoints);
    last_step_ = step;
    last_position_ = next;
    return last_path_;
  }

  // Marks the state loaded by --resume as already saved.
  void loaded(int64_t step, data::LoaderPosition position, std::string path) {
    last_step_ = step;
    last_position_ = position;
    last_path_ = std::move(path);
  }

 private:
  const TrainOptions& o_;
  nn::Module& model_;
  optim::Optimizer& optimizer_;
  optim::LRScheduler* scheduler_;
  const amp::GradScaler& scaler_;
  std::string config_;
  bool writer_;
  int64_t last_step_ = -1;
  data::LoaderPosition last_position_{-1, -1};
  std::string last_path_;
};

// Where a run starts: from scratch, or from the newest complete checkpoint (--resume).
struct StartPoint {
  int64_t step = 0;
  data::LoaderPosition position;
  EpochProgress progress;
  std::string path;  // the checkpoint resumed from ("" = from scratch)
};

// The newest good checkpoint's state loaded into model, optimizer, scheduler and scaler (with
// --resume), or step 0; refuses a non-empty directory without --resume.
StartPoint find_start(const TrainOptions& o, const std::string& config, nn::Module& model,
                      amp::GradScaler& scaler, optim::Optimizer& optimizer,
                      optim::LRScheduler* scheduler);

}  // namespace gradus::cli
