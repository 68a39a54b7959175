// gradus train's checkpoints: the training layer's (gradus/train/checkpoints.h) configured by the
// command line (--checkpoint-dir, --keep-checkpoints, --resume, --resume-or-start), with the
// CLI's check of a checkpoint's stored configuration (run_state.h).
#pragma once

#include <string>

#include "commands.h"
#include "gradus/train/checkpoints.h"
#include "gradus/train/deferred_losses.h"
#include "gradus/train/step_graph.h"
#include "run_state.h"

namespace gradus::cli {

using train::agree_on_step;
using train::Checkpointer;
using train::DeferredLosses;
using train::EpochProgress;
using train::install_stop_handlers;
using train::kGraphWarmupSteps;
using train::StartPoint;
using train::StepGraph;
using train::StepLoss;

inline train::CheckpointOptions checkpoint_options(const TrainOptions& o) {
  return {.dir = o.checkpoint_dir,
          .keep = o.keep_checkpoints,
          .resume = o.resume,
          .resume_or_start = o.resume_or_start,
          .who = "gradus train"};
}

// The newest good checkpoint's state loaded (with --resume), or step 0; refuses a non-empty
// directory without --resume, and a checkpoint whose configuration differs where it matters.
inline StartPoint find_start(const TrainOptions& o, const std::string& config, nn::Module& model,
                             amp::GradScaler& scaler, optim::Optimizer& optimizer,
                             optim::LRScheduler* scheduler) {
  return train::find_start(checkpoint_options(o), config, model, scaler, optimizer, scheduler,
                           check_resume_config);
}

}  // namespace gradus::cli
