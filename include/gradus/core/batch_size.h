// Finding the largest batch that fits in memory.
//
//   auto r = find_batch_size([&](int64_t b) { one_training_step(b); });   // throws on OOM
//   train(r.batch_size);
//
// try_step(b) must run one full training step at batch size b (forward, backward, optimizer:
// everything a real step allocates) and throw OutOfMemoryError when it does not fit (the GPU pool,
// or the CPU limit of host::set_memory_limit). The search doubles from `start` until a step fails
// or `max` is reached, then bisects between the largest size that fit and the smallest that did
// not, and returns the largest fit scaled by `margin` (headroom for fragmentation and for what the
// real run adds, such as the data loader's prefetched batches), rounded down to a multiple of
// `multiple`; when every size up to `max` fits, `max`. Nothing leaks across a failed try: the
// exception unwinds every tensor of the step.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace gradus {

struct BatchSizeSearch {
  int64_t start = 16;
  int64_t max = 65536;
  double margin = 0.9;
  int64_t multiple = 1;  // e.g. the number of data-parallel ranks
  int max_bisections = 6;
};

struct BatchSizeResult {
  int64_t batch_size = 0;     // what to train with
  int64_t largest_fit = 0;    // the largest size that ran
  int64_t smallest_fail = 0;  // the smallest that did not (0: none failed up to max)
  std::vector<std::pair<int64_t, bool>> tried;  // (size, fitted), in order
};

// Throws OutOfMemoryError (naming the sizes tried) when not even `multiple` fits; rethrows any
// other error of try_step.
BatchSizeResult find_batch_size(const std::function<void(int64_t)>& try_step,
                                const BatchSizeSearch& search = {});

}  // namespace gradus
