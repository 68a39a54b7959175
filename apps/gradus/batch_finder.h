// gradus train --batch-size auto (batch_finder.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradus/core/device.h"
#include "gradus/core/shape.h"
#include "gradus/nn/module.h"
#include "gradus/optim/optimizer.h"

namespace gradus::cli {

struct AutoBatchArgs {
  std::function<std::shared_ptr<nn::Module>()> make_model;
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make_optimizer;
  Shape example_shape;  // one example, e.g. {1, 28, 28}
  int64_t classes = 10;
  Device device;
  int world_size = 1;
  int64_t max_per_rank = 65536;
  bool resume = false;
  std::string checkpoint_dir;
  std::optional<DType> amp;  // the trial steps run under autocast to this dtype, as training will
};

// The global batch size to train with; prints what it tried.
int64_t auto_batch_size(const AutoBatchArgs& args);

}  // namespace gradus::cli
