// Host copies that an asynchronous checkpoint write owns (private to gradus_train).
#pragma once

#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::train {

// Copies of `tensors` in host memory of their own (undefined ones stay undefined), for a write
// that outlives the step: what training goes on to change must not reach it. CUDA tensors are
// copied into one page-locked block (the device copies into it without the driver staging the
// bytes; freed with the last copy), pageable memory when pinning fails; CPU tensors are cloned.
std::vector<Tensor> host_copies(const std::vector<Tensor>& tensors);

}  // namespace gradus::train
