// The largest batch a training run can take: gradus::find_batch_size's search, with trial steps
// that are the run's own (the Task's loss under the run's autocast, backward, the optimizer) on a
// scratch copy of the model, so the run itself then starts from the same weights and random state
// as it would with that batch size given.
//
//   const train::BatchSizeChoice choice = train::choose_batch_size({
//       .make_model = build_model, .make_optimizer = make_adamw, .task = task,
//       .make_batch = [](int64_t rows) { return data::Example{randn({rows, 784}),
//                                                             randint(0, 10, {rows})}; },
//       .device = Device::cuda(0)});
//   loader_options.batch_size = choice.global;
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "gradus/core/batch_size.h"
#include "gradus/data/dataset.h"
#include "gradus/dist/process_group.h"
#include "gradus/train/trainer.h"

namespace gradus::train {

struct BatchSizeOptions {
  std::function<std::shared_ptr<nn::Module>()> make_model = nullptr;  // as the run builds its own
  OptimizerFactory make_optimizer = nullptr;
  std::shared_ptr<Task> task = nullptr;  // the trial steps' loss (Task::loss)
  // A batch of `rows` examples shaped like the data's (any values: only memory is measured).
  std::function<data::Example(int64_t rows)> make_batch = nullptr;
  Device device = Device::cpu();
  std::optional<DType> amp = std::nullopt;  // the trial steps' autocast, as training's
  int64_t start = 16;
  int64_t max_per_rank = 65536;  // e.g. the training set's share of each rank
  // The data-parallel ranks: each searches alone, then all take the smallest share any can hold
  // (a collective). nullptr: one process.
  std::shared_ptr<dist::ProcessGroup> group = nullptr;
};

struct BatchSizeChoice {
  int64_t per_rank = 0;
  int64_t global = 0;      // per_rank x the ranks
  BatchSizeResult search;  // this rank's search: the sizes tried and what fit
};

// Throws OutOfMemoryError when not even one example fits; the model and optimizer made for the
// trials are released (and the GPU's cache emptied) before it returns.
BatchSizeChoice choose_batch_size(const BatchSizeOptions& options);

}  // namespace gradus::train
