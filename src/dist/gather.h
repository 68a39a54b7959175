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

// GPT's c_attn stacks q, k and v ([3C, ...]); tensor rank r keeps rows [r*k, (r+1)*k) of each of
// the three blocks (TensorParallelSelfAttention, TensorParallelGPT).
// Rank r's [3k, ...] rows of a stacked [3C, ...] tensor.
Tensor qkv_rows(const Tensor& full, int64_t c, int64_t r, int64_t k);
// Every rank's [3k, ...] q/k/v rows back into the stacked [3C, ...] layout (one all-gather).
Tensor gather_qkv(const Tensor& local, ProcessGroup& g, int64_t k, const std::string& label);

}  // namespace gradus::dist::detail
