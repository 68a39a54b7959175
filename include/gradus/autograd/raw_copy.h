// Copies that bypass autograd's bookkeeping, for the layers that manage memory under the model
// (fully sharded data parallelism, asynchronous checkpoints). Not for changing values autograd
// depends on: a tensor saved for backward that is rewritten with different values through these
// is not detected.
#pragma once

#include "gradus/core/tensor.h"

namespace gradus {

// dst = src cast to dst's dtype (same shape, same device), written into dst's memory without
// bumping its version, as a collective's write is: for memory refilled with the values it held
// before it was freed (FSDP gathers a unit again before its backward, into the storage its forward
// saved), which autograd must keep accepting.
void copy_unversioned(const Tensor& src, const Tensor& dst);

// The bytes of `src` (contiguous, any device) into `host`, host memory of src's size in bytes.
// From a GPU into page-locked memory the device copies directly, without the driver's staging.
void copy_to_host_memory(const Tensor& src, void* host);

}  // namespace gradus
