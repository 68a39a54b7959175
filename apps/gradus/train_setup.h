// Pieces of a training run shared by the train tasks (train.cpp, train_parallel.cpp).
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "commands.h"
#include "gradus/data/mnist.h"
#include "gradus/optim/optim.h"

namespace gradus::cli {

// --optimizer sgd|adam|adamw with --lr, --momentum and --weight-decay.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, double lr,
                                                 std::vector<Tensor> params);

// The per-step LR schedule (stepped after every optimizer step): a linear warm-up over
// warmup_steps (from 1% of --lr), then constant (none), a half cosine down to 0 over the remaining
// steps (cosine), or a drop by step_gamma every step_epochs epochs (step). nullptr = constant.
std::shared_ptr<optim::LRScheduler> make_scheduler(const TrainOptions& o,
                                                   optim::Optimizer& optimizer, int64_t total_steps,
                                                   int64_t steps_per_epoch);

// Every option given that `task` does not honour is refused, naming it: an option is either
// honoured or refused, never accepted and ignored. `honoured` lists long names without dashes.
void refuse_options_not_in(const TrainOptions& o, const char* task,
                           std::initializer_list<const char*> honoured);

// --data mnist needs --data-dir: refused before anything is built or read.
void check_image_data_options(const TrainOptions& o);
// The training split (--limit-train; raw [0, 1] pixels under --augment, which normalises on the
// device after padding, else normalised) or the test split (--limit-test, normalised) of
// --data mnist|fashion-mnist.
std::shared_ptr<data::TensorDataset> load_image_split(const TrainOptions& o, bool train);

}  // namespace gradus::cli
