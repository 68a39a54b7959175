// What `gradus train` stores in a checkpoint beyond the model/optimizer/scheduler/RNG state: the
// run configuration (to refuse an incompatible --resume) and the data position plus the running
// loss of the epoch in progress (so a resumed run prints the same epoch summary).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "commands.h"
#include "gradus/io/checkpoint.h"
#include "gradus/train/agreement.h"

namespace gradus::cli {

// The run configuration as JSON text (what TrainingState::config holds). `threads` and `device`
// are what the run actually used.
std::string run_config_json(const TrainOptions& o, int threads, const std::string& device);

// Compares a checkpoint's stored configuration with this run's. Throws ValueError naming every
// key that changes the computation (model, data, batch size, optimizer and its
// hyperparameters, schedule, seed), with both values. Returns notes (printed as warnings) for
// keys that may differ but affect the result: epochs (the schedule's length), threads (conv2d
// gradients depend on it), device.
std::vector<std::string> check_resume_config(const std::string& stored, const std::string& current,
                                             const std::string& checkpoint_path);

// The settings every rank of a data-parallel run must share (the Trainer compares them before
// training): each key of the run configuration but the thread count, the device and the
// --init-from path, which may differ between ranks.
train::Settings rank_settings(const std::string& config);

// (The epoch in progress is train::EpochProgress, gradus/train/checkpoints.h.)

}  // namespace gradus::cli
