// Internal to gradus::dist: gathering a tensor from every rank of a group (the tensor-parallel
// layers' full state dicts and their gather mappings).
#pragma once

#include <string>
#include <vector>

#include "gradus/dist/process_group.h"

namespace gradus::dist::detail {

// Every rank's `x` (the same shape on each), in rank order: one blocking all-gather.
std::vector<Tensor> gather_from_every_rank(const Tensor& x, ProcessGroup& g,
                                           const std::string& label);

}  // namespace gradus::dist::detail
