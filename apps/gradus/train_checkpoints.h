// gradus train's checkpoints: the training layer's (gradus/train/checkpoints.h) configured by the
// command line (--checkpoint-dir, --keep-checkpoints, --resume, --resume-or-start), with the
// CLI's check of a checkpoint's stored configuration (run_state.h).
#pragma once

#include <cstdio>
#include <string>

#include "commands.h"
#include "gradus/train/checkpoints.h"
#include "gradus/train/deferred_losses.h"
#include "gradus/train/step_graph.h"
#include "gradus/train/strategy.h"
#include "gradus/train/trainer.h"
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

// --checkpoint-format: whether the run writes sharded checkpoint sets. auto: where the strategy
// shards the optimizer state (zero1, zero2, fsdp) and no --tp/--pp splits the model.
inline bool sharded_checkpoints(const TrainOptions& o) {
  const bool can = !o.dist.empty() &&
                   train::make_strategy(o.dist)->caps().sharded_optimizer_state && o.tp == 1 &&
                   o.pp == 1;
  GRADUS_CHECK(o.checkpoint_format != "sharded" || can, ValueError,
               "train: --checkpoint-format sharded needs --dist zero1, zero2 or fsdp without "
               "--tp/--pp (this run: --dist ",
               o.dist.empty() ? "(none)" : o.dist, ", --tp ", o.tp, ", --pp ", o.pp, ")");
  return o.checkpoint_format == "sharded" || (o.checkpoint_format == "auto" && can);
}

inline train::CheckpointOptions checkpoint_options(const TrainOptions& o) {
  return {.dir = o.checkpoint_dir,
          .keep = o.keep_checkpoints,
          .resume = o.resume,
          .resume_or_start = o.resume_or_start,
          .who = "gradus train",
          .async = o.async_checkpoint,
          .sharded = sharded_checkpoints(o)};
}

// What the run's checkpoints cost it (the lead rank's line, on stderr): how many were written,
// how long training waited for them and how long the writes took.
inline void report_checkpoint_times(const train::FitResult& fit, bool lead) {
  const train::CheckpointTimes& t = fit.checkpoint_times;
  if (!lead || t.written == 0) return;
  std::fprintf(stderr,
               "gradus train: %lld checkpoint(s): training waited %.3f s for them (and %.3f s at "
               "the end for the last write), the writes took %.3f s\n",
               static_cast<long long>(t.written), t.blocked_seconds, t.final_wait_seconds,
               t.write_seconds);
}

// The newest good checkpoint's state loaded (with --resume), or step 0; refuses a non-empty
// directory without --resume, and a checkpoint whose configuration differs where it matters.
inline StartPoint find_start(const TrainOptions& o, const std::string& config, nn::Module& model,
                             amp::GradScaler& scaler, optim::Optimizer& optimizer,
                             optim::LRScheduler* scheduler) {
  return train::find_start(checkpoint_options(o), config, model, scaler, optimizer, scheduler,
                           check_resume_config);
}

// After a Trainer run that stopped early (--stop-after-steps or SIGINT/SIGTERM/SIGHUP/SIGUSR1,
// with its checkpoint): the stop line (the lead rank's), "stopped_at_step=N" on stdout, and the
// exit code (128 + the signal, 0 for --stop-after-steps).
inline int report_stop(const train::FitResult& fit, bool lead) {
  report_checkpoint_times(fit, lead);
  if (lead) {
    const char* why =
        fit.stop_signal != 0 ? train::stop_signal_name(fit.stop_signal) : "--stop-after-steps";
    std::fprintf(stderr, "gradus train: stopped after step %lld (%s)%s%s\n",
                 static_cast<long long>(fit.steps), why,
                 fit.checkpoint.empty() ? "" : "; checkpoint ", fit.checkpoint.c_str());
  }
  std::printf("stopped_at_step=%lld\n", static_cast<long long>(fit.steps));
  std::fflush(stdout);
  return fit.stop_signal != 0 ? 128 + fit.stop_signal : 0;
}

}  // namespace gradus::cli
