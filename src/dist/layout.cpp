#include "gradus/dist/layout.h"

#include <sstream>

#include "gradus/core/error.h"

namespace gradus::dist {

std::string ParallelGroups::describe() const {
  std::ostringstream os;
  os << layout.data << " data x " << layout.pipeline << " pipeline x " << layout.tensor
     << " tensor; this rank: data " << data_rank << ", stage " << pipeline_rank << ", tensor "
     << tensor_rank;
  return os.str();
}

ParallelGroups make_parallel_groups(ParallelLayout layout) {
  const int n = world_size();
  GRADUS_CHECK(layout.tensor >= 1 && layout.pipeline >= 1 && layout.data >= 0, ValueError,
               "dist: the parallel layout needs tensor >= 1 and pipeline >= 1, got tensor ",
               layout.tensor, ", pipeline ", layout.pipeline);
  const int model_ranks = layout.tensor * layout.pipeline;
  GRADUS_CHECK(n % model_ranks == 0, ValueError, "dist: ", n, " rank(s) cannot be split into ",
               layout.tensor, " tensor x ", layout.pipeline, " pipeline = ", model_ranks,
               " ranks per replica (the world size must be a multiple of it)");
  if (layout.data == 0) layout.data = n / model_ranks;
  GRADUS_CHECK(layout.data * model_ranks == n, ValueError, "dist: ", layout.data, " data x ",
               layout.pipeline, " pipeline x ", layout.tensor,
               " tensor = ", layout.data * model_ranks, " ranks, but the world has ", n);
  ParallelGroups g;
  g.layout = layout;
  const int r = rank();
  g.tensor_rank = r % layout.tensor;
  g.pipeline_rank = (r / layout.tensor) % layout.pipeline;
  g.data_rank = r / model_ranks;
  // One split per axis; the color names the other two coordinates.
  g.tensor = split_group(g.data_rank * layout.pipeline + g.pipeline_rank, g.tensor_rank);
  g.pipeline = split_group(g.data_rank * layout.tensor + g.tensor_rank, g.pipeline_rank);
  g.data = split_group(g.pipeline_rank * layout.tensor + g.tensor_rank, g.data_rank);
  return g;
}

}  // namespace gradus::dist
