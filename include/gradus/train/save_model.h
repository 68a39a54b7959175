// Writing a trained model's whole weights from a strategy (gradus::train).
#pragma once

#include <map>
#include <string>

#include "gradus/train/strategy.h"

namespace gradus::train {

// Writes the model's whole weights under its state_dict() names to `path` (safetensors, with
// `metadata`) from data rank 0: a collective over the strategy's data ranks. The parameters are
// gathered a part at a time (Strategy::parameter_parts: under fsdp one unit) and written as they
// come, so no rank ever holds the whole model. A tensor with a non-finite value stops the save
// (ValueError naming it; no file is written). Without tensor or pipeline parallelism, whose whole
// model full_model_state() gathers.
void save_model(Strategy& strategy, const std::string& path,
                const std::map<std::string, std::string>& metadata = {});

}  // namespace gradus::train
