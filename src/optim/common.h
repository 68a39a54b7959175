// Helpers shared by the optimizers in src/optim. Internal.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "gradus/optim/optimizer.h"

namespace gradus::optim::detail {

// Parameters of one group that have a gradient, bucketed by (device, dtype, key): contiguous
// param/grad tensors ready for a multi-tensor kernel. Non-contiguous params are staged through a
// contiguous copy that finish() writes back.
struct Bucket {
  Device device;
  DType dtype = DType::f32;
  int64_t key = 0;              // extra bucketing key (e.g. the step count for Adam)
  std::vector<size_t> indices;  // positions in the group
  std::vector<Tensor> params, grads;
  std::vector<std::pair<Tensor, Tensor>> write_back;  // (original param, staged copy)
  // Writes staged params back and bumps every param's version counter (the kernels update
  // params in place behind autograd's back).
  void finish();
};

// Buckets the params of a group that have a defined gradient. key(i) gives the extra bucketing
// key of the param at position i. `op` names the optimizer in error messages.
std::vector<Bucket> make_buckets(const char* op, const std::vector<Tensor>& params,
                                 const std::function<int64_t(size_t)>& key);

}  // namespace gradus::optim::detail
