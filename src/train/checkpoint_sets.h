// A sharded optimizer's checkpoint as a set (io/checkpoint_set.h): what this rank writes, taken
// without gathering anything (private to gradus_train; Checkpointer uses it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradus/dist/zero.h"
#include "gradus/io/checkpoint_set.h"
#include "gradus/nn/module.h"

namespace gradus::train::sets {

struct SetWrite {
  std::string id;  // the same on every rank
  int rank = 0, world = 1;
  // The index's content (run metadata, the model's unsharded tensors, the optimizer's scalars):
  // complete on every rank, written by rank 0.
  io::TrainingState index;
  std::vector<io::ShardedTensor> sharded;
  std::vector<std::string> model_order;
  std::vector<io::TensorPiece> pieces;          // this rank's shard
  std::vector<io::ShardRanges> ranges_by_rank;  // every rank's, for the index
};

// This rank's part of the state after `step`: the parameters the optimizer updates and their
// state as this rank's slices of them; buffers and frozen parameters whole in the index. One
// collective (the ranks agree on the set's id); the tensors are views of the live state.
SetWrite capture(const dist::ZeroRedundancyOptimizer& optimizer, const nn::Module& model,
                 int64_t step);
// Replaces every tensor by a host copy of its own (host_copies: an asynchronous write outlives
// the step).
void copy_to_host(SetWrite& set);

}  // namespace gradus::train::sets
