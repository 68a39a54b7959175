// Checkpoints of a training run: the writer, where a run starts (resume from the newest good
// checkpoint), the stop signals that end a run with a checkpoint, and the per-step agreement of
// a data-parallel run's ranks. The Trainer uses these; so does a hand-written loop.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gradus/amp/grad_scaler.h"
#include "gradus/data/dataloader.h"
#include "gradus/dist/dist.h"
#include "gradus/dist/pipeline.h"
#include "gradus/dist/tensor_parallel.h"
#include "gradus/dist/zero.h"
#include "gradus/io/checkpoint.h"
#include "gradus/nn/module.h"
#include "gradus/optim/optim.h"
#include "gradus/train/full_parameters.h"

namespace gradus::train {

// SIGINT/SIGTERM/SIGHUP/SIGUSR1 while checkpointing is on: the loop finishes its step, writes a
// checkpoint and exits with 128 + the signal (SIGUSR1: what Slurm's --signal=USR1@T sends ahead
// of a time limit). install_stop_handlers() routes the signals to stop_signal(); a second signal
// of the same kind ends the process at once.
void install_stop_handlers();
// The signal that asked the run to stop (0: none).
int stop_signal();
void request_stop(int signal);
// "SIGINT", "SIGTERM", "SIGHUP" or "SIGUSR1".
const char* stop_signal_name(int signal);

// After a step of a data-parallel run (collective over the data ranks): the global batch's loss,
// the mean of the ranks' shares, and whether to stop after this step: a stop request that any
// rank had when it entered the exchange (the signal, or SIGTERM where the ranks' signals
// differ), 0 for none. A loop must stop on stop_signal, not on its own flag: a signal landing
// after the exchange would stop one rank alone; it is agreed at the next step's exchange. A read
// and one exchange every step.
struct StepAgreement {
  double loss = 0;
  int stop_signal = 0;
};
StepAgreement agree_on_step(dist::ProcessGroup& group, const Tensor& loss);

// The epoch in progress: its running loss sum, examples seen and the lr of its last step (what an
// epoch summary prints), stored exactly (hex floats) in the checkpoint's extra metadata.
struct EpochProgress {
  double loss_sum = 0;
  int64_t samples = 0;
  double last_lr = 0;
};
void store_epoch_progress(io::TrainingState& s, const EpochProgress& p);
// All zero when the checkpoint has none (e.g. written by another program).
EpochProgress load_epoch_progress(const io::TrainingState& s);

struct CheckpointOptions {
  std::string dir;  // "" = no checkpoints
  int keep = 3;     // newest complete checkpoints kept (0 = all)
  // Continue from the newest good checkpoint in `dir` (without it a non-empty `dir` is an
  // error: two runs must not mix their checkpoints).
  bool resume = false;
  // With resume: when every checkpoint is damaged, start at step 0 instead of failing.
  bool resume_or_start = false;
  std::string who = "train";  // prefixes the messages
  bool report = true;         // print what a resume finds and does (one rank of many: false)
  // The model's split when tensor parallelism splits it: checkpoints then hold one process's
  // model and optimizer state (gathered from the shards when saving, a collective; this rank's
  // shards taken when resuming), so they resume under any layout.
  dist::TensorParallelModule* tensor_parallel = nullptr;
  // The pipeline when the model is cut into stages (the model and optimizer given are this
  // stage's): checkpoints then hold the whole model and its optimizer state, every stage's part
  // gathered on stage 0 when saving (a collective over the pipeline group) and taken back when
  // resuming, so they resume under any layout.
  dist::Pipeline* pipeline = nullptr;
  // Gathers a sharded model's whole parameters for as long as the result lives
  // (Strategy::full_parameters: fsdp); unset when they are always whole.
  std::function<FullParameters()> full_parameters = nullptr;
  // Write each checkpoint on a background thread: save() gathers the state (the collectives),
  // copies its tensors to host memory and returns while the file is written, so training
  // continues; the next save() waits for the previous write first. Files still appear only by
  // atomic rename, so a kill at any moment leaves the last complete checkpoint loadable.
  bool async = false;
  // Write each checkpoint as a set (io/checkpoint_set.h): every rank writes the slices of the
  // parameters and optimizer state its sharded optimizer owns, and data rank 0 the index, so no
  // rank gathers the model or its optimizer state. A set loads as one checkpoint, under any world
  // size and layout. Needs a dist::ZeroRedundancyOptimizer (zero1, zero2, fsdp), without tensor
  // or pipeline parallelism, and one file system for the ranks' files.
  bool sharded = false;
  // An asynchronous set's index is written once every rank's shard is: how long its writer
  // waits for them before it gives up (the set is then not written; the error is save()'s or
  // finish()'s).
  double shard_wait_seconds = 600;
};

// What a run's checkpoints cost it: how long the training loop waited in save() (gathering and
// copying the state, and with async writes waiting for the previous one), how long the run's end
// (or stop) waited for the last asynchronous write, and how long the writes themselves took (on
// the background thread when async).
struct CheckpointTimes {
  int64_t written = 0;
  double blocked_seconds = 0;
  double final_wait_seconds = 0;
  double write_seconds = 0;
};

// The one-process model's state (its names, full shapes) from what this rank holds of it: `held`
// itself, its shards gathered over split's tensor group, and under a pipeline every stage's part
// gathered on stage 0 (collectives: every rank of a replica calls it). Complete on stage 0 (and
// everywhere without a pipeline); the other stages get an empty one.
nn::StateDict full_model_state(nn::Module& held, dist::TensorParallelModule* split,
                               dist::Pipeline* pipeline);

// Writes the checkpoints of one run; skips a save that would repeat the last one exactly.
// `writer` is false on every rank but the one that writes for the world (all ranks call save():
// a sharded optimizer's state_dict() is a collective).
class Checkpointer {
 public:
  Checkpointer(CheckpointOptions options, nn::Module& model, optim::Optimizer& optimizer,
               optim::LRScheduler* scheduler, const amp::GradScaler& scaler, std::string config,
               bool writer);

  bool enabled() const { return !options_.dir.empty(); }

  // The state after `step` optimizer steps, with the loader at `next` (the next batch to train
  // on) and the running loss of the epoch in progress. Returns the file written ("" if none).
  std::string save(int64_t step, data::LoaderPosition next, const EpochProgress& progress);

  // Marks the state a resume loaded as already saved.
  void loaded(int64_t step, data::LoaderPosition position, std::string path);

  // At the run's end or stop: waits for an asynchronous write still in flight; rethrows its
  // error (IOError naming the file). A no-op for synchronous writes.
  void finish();
  // Joins a write still in flight (errors are left to finish()).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;
  const CheckpointTimes& times() const { return times_; }

 private:
  // Joins the write in flight and returns how long that took; rethrows its error.
  double wait_for_write();
  // save() of a sharded checkpoint (options_.sharded).
  std::string save_set(int64_t step, data::LoaderPosition next, const EpochProgress& progress,
                       std::chrono::steady_clock::time_point t0);
  CheckpointOptions options_;
  nn::Module& model_;
  optim::Optimizer& optimizer_;
  optim::LRScheduler* scheduler_;
  const amp::GradScaler& scaler_;
  std::string config_;
  bool writer_;
  const dist::ZeroRedundancyOptimizer* sharded_optimizer_ = nullptr;  // sharded checkpoints
  int64_t last_step_ = -1;
  data::LoaderPosition last_position_{-1, -1};
  std::string last_path_;
  std::thread writing_;             // the asynchronous write in flight (joinable) or none
  std::exception_ptr write_error_;  // what it threw
  double write_seconds_ = 0;        // its duration, set by the thread
  CheckpointTimes times_;
};

// Where a run starts: from scratch, or from the newest good checkpoint.
struct StartPoint {
  int64_t step = 0;
  data::LoaderPosition position;
  EpochProgress progress;
  std::string path;  // the checkpoint resumed from ("" = from scratch)
};

// Compares a checkpoint's stored configuration with this run's: throws on a difference that
// changes the computation, returns notes (printed as warnings) for the others.
using ConfigCheck = std::function<std::vector<std::string>(
    const std::string& stored, const std::string& current, const std::string& checkpoint_path)>;
// The default check: a note when the two differ at all.
std::vector<std::string> note_config_difference(const std::string& stored,
                                                const std::string& current,
                                                const std::string& checkpoint_path);

// With options.resume: the newest good checkpoint's state loaded into model, optimizer,
// scheduler and scaler (and the RNG), stale temp files of killed writers removed, old
// checkpoints pruned to options.keep. Without: step 0, refusing a directory that holds a run.
StartPoint find_start(const CheckpointOptions& options, const std::string& config,
                      nn::Module& model, amp::GradScaler& scaler, optim::Optimizer& optimizer,
                      optim::LRScheduler* scheduler,
                      const ConfigCheck& check_config = note_config_difference);

}  // namespace gradus::train
