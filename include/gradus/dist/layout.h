// 2-D and 3-D layouts of one world: data parallelism around pipeline stages and/or tensor-
// parallel layers, each axis a sub-group (split_group).
//
//   // 4 ranks = 2 data-parallel replicas x 2 pipeline stages
//   dist::ParallelGroups g = dist::make_parallel_groups({.tensor = 1, .pipeline = 2});
//   dist::Pipeline pipe(model, opts, g.pipeline);
//   ...; dist::average_gradients(pipe.parameters(), *g.data);
//
// Rank order: world rank = (data_rank * pipeline + pipeline_rank) * tensor + tensor_rank, so the
// ranks of a tensor-parallel group (two collectives per layer) are neighbours, on one host when
// the launcher fills hosts in rank order, and data-parallel replicas (one all-reduce per step)
// are the farthest apart, as Megatron places them.
#pragma once

#include <memory>
#include <string>

#include "gradus/dist/process_group.h"

namespace gradus::dist {

struct ParallelLayout {
  int tensor = 1;
  int pipeline = 1;
  int data = 0;  // 0: what is left of the world (world size / (tensor * pipeline))
};

struct ParallelGroups {
  ParallelLayout layout;  // with `data` resolved
  int tensor_rank = 0, pipeline_rank = 0, data_rank = 0;
  std::shared_ptr<ProcessGroup> tensor, pipeline, data;
  std::string describe() const;  // "2 data x 2 pipeline x 1 tensor; this rank: data 1, stage 0"
};

// Collective over the world (every rank calls it). ValueError when a size is < 1 or the world's
// size is not tensor * pipeline * data.
ParallelGroups make_parallel_groups(ParallelLayout layout);

}  // namespace gradus::dist
