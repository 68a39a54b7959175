// Training checkpoints: the whole state needed to resume a run bit-for-bit (model weights,
// optimizer state, scheduler and loss-scaler state, RNG state, data-loader position, step and the
// run configuration) in one safetensors file.
//
// Layout of ckpt-<step>.safetensors:
//   tensors   "model.<state_dict name>", "optim.<OptimizerState tensor name>",
//             "extra.<name>" (user tensors)
//   metadata  "format": "gradus.checkpoint", "format_version": "2", "step", "epoch",
//             "batch_index", "rng" ({"seed": s, "offset": o}), "optim.type",
//             "optim.scalars", "scheduler", "scaler" (JSON objects of numbers), "config" (the
//             run configuration, verbatim), "extra.<key>" (user strings), "checksums" (JSON:
//             tensor name -> zlib CRC-32 of its bytes), "metadata_crc32" (CRC-32 of every other
//             metadata entry, as the JSON object of them in key order)
//
// Integrity: a flipped bit anywhere is detected. load_checkpoint() verifies every checksum
// (format 2; format-1 files, which have none, still load) and refuses non-finite tensors;
// save_checkpoint() refuses to write non-finite tensors.
// Python reads it with safetensors.safe_open(path, "pt"): .keys(), .get_tensor(), .metadata().
//
// Crash safety: each checkpoint is written with AtomicFile (temp file, fsync, rename, fsync dir)
// and old ones are deleted only after the new one is durable, so a process SIGKILLed at any
// moment leaves the newest complete checkpoint loadable; latest_checkpoint() skips temp files and
// anything that fails validation.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gradus/core/random.h"
#include "gradus/nn/module.h"
#include "gradus/optim/optimizer.h"
#include "gradus/optim/scheduler.h"

namespace gradus::io {

struct TrainingState {
  int64_t step = 0;                         // optimizer steps taken
  nn::StateDict model;                      // Module::state_dict()
  optim::OptimizerState optimizer;          // Optimizer::state_dict() (type "" = no optimizer)
  std::map<std::string, double> scheduler;  // LR scheduler state (e.g. last_epoch, base_lr)
  std::map<std::string, double> scaler;     // GradScaler state (scale, growth tracker)
  PhiloxState rng;                          // default_generator().state()
  int64_t epoch = 0;                        // data-loader position: epoch and batch within it
  int64_t batch_index = 0;
  std::string config;  // the run configuration (JSON text), stored verbatim
  std::map<std::string, Tensor> extra_tensors;  // anything else the program wants to keep
  std::map<std::string, std::string> extra;
};

// Captures model.state_dict(), optimizer->state_dict() and scheduler->state_dict() (when given)
// and the default generator's RNG state; the caller fills the remaining fields.
TrainingState capture_training_state(const nn::Module& model, const optim::Optimizer* optimizer,
                                     int64_t step, const optim::LRScheduler* scheduler = nullptr);
// Loads, in this order, the model weights (strict: nothing is copied unless every key and shape
// matches), the optimizer state (when `optimizer` is given; the state must hold one of the same
// type), the scheduler state (when given; it re-applies its lr to the optimizer) and, when
// restore_rng, the default generator's state (set last, so a throw leaves it untouched).
void restore_training_state(const TrainingState& state, nn::Module& model,
                            optim::Optimizer* optimizer, optim::LRScheduler* scheduler = nullptr,
                            bool restore_rng = true);

// The file name used for `step`: "ckpt-0000000042.safetensors" (10+ digits).
std::string checkpoint_filename(int64_t step);

// Writes dir/ckpt-<step>.safetensors atomically (creating dir if needed), then, when
// keep_last_k > 0, deletes the oldest complete checkpoints (by step) so that at most keep_last_k
// remain. The file just written is never deleted; files that fail validation neither count nor
// are deleted (they are left for inspection); temp files are untouched. Returns the path written.
std::string save_checkpoint(const std::string& dir, int64_t step, const TrainingState& state,
                            int keep_last_k = 0);

// Deletes the oldest complete checkpoints (by step; a set with its shards) so that at most `keep`
// remain, never the one at keep_step; files that fail validation are left for inspection. 0: keep
// all.
void prune_checkpoints(const std::string& dir, int keep, int64_t keep_step = -1);

// The checkpoints in dir whose names match ckpt-<digits>.safetensors (not validated), sorted by
// ascending step. Temp files are never listed. Empty when dir does not exist; IOError when it
// exists but cannot be listed (not a directory, permission denied).
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);

// The path of the newest checkpoint in dir whose header validates against its file size and is a
// gradus checkpoint; std::nullopt when there is none (or dir does not exist).
std::optional<std::string> latest_checkpoint(const std::string& dir);

// Non-finite elements of a floating tensor (0 for other dtypes), counted in one pass over the bits
// in the calling thread (no op, no OpenMP: safe in forked and signal-interrupted writers).
int64_t count_nonfinite(const Tensor& t);

// Reads a checkpoint written by save_checkpoint and verifies it (checksums, metadata, finite
// values). Tensors are on the CPU (restore moves them). Throws IOError naming the file and what
// is damaged.
TrainingState load_checkpoint(const std::string& path);

// Everything wrong with a checkpoint file (unreadable, not a checkpoint, a tensor or the
// metadata damaged, non-finite values); empty when it can be resumed from.
std::vector<std::string> verify_checkpoint(const std::string& path);

// The newest checkpoint of dir that loads and verifies, and the newer ones that did not (path,
// why), newest first.
struct GoodCheckpoint {
  std::string path;
  TrainingState state;
  std::vector<std::pair<std::string, std::string>> skipped;
};
// Thrown by latest_good_checkpoint when dir holds checkpoints but none is usable.
class UnusableCheckpointsError : public IOError {
 public:
  explicit UnusableCheckpointsError(std::vector<std::pair<std::string, std::string>> skipped);
  const std::vector<std::pair<std::string, std::string>>& skipped() const { return skipped_; }

 private:
  std::vector<std::pair<std::string, std::string>> skipped_;
};
// std::nullopt when dir holds no checkpoint file (or does not exist).
std::optional<GoodCheckpoint> latest_good_checkpoint(const std::string& dir);

}  // namespace gradus::io
