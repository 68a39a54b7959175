// Image classification's model-parallel layouts (--tp, --pp): what the Trainer is given
// (train_parallel.cpp).
#pragma once

#include <memory>

#include "commands.h"
#include "gradus/dist/layout.h"
#include "gradus/nn/module.h"
#include "gradus/train/strategy.h"

namespace gradus::cli {

// The image model, whole, as every rank builds it from the seed: --model (an MLP with --dropout),
// or under --tp the MLP with its hidden layers split over the tensor group (nn::MLP's names and,
// from the same seed, its weights).
std::shared_ptr<nn::Module> build_image_model(const TrainOptions& o,
                                              const dist::ParallelGroups& groups);

// The strategy options of a layout: the data group, and under --pp the pipeline over `model`
// (--micro-batches, --schedule; --grad-checkpoint on the stage's layers), under --tp the split
// layers' view of what this rank holds. Prints the stage this rank holds.
train::StrategyOptions image_layout_options(const TrainOptions& o,
                                            std::shared_ptr<nn::Module> model,
                                            const dist::ParallelGroups& groups, bool lead);

}  // namespace gradus::cli
