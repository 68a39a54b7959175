// Datasets: random access to (input, target) examples. The DataLoader asks for whole batches
// through get_batch(), so an in-memory dataset can gather a batch with one copy per row instead
// of building one tensor per example and stacking them.
#pragma once

#include <cstdint>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::data {

// One example, or one batch of examples (then dim 0 of both tensors is the batch).
struct Example {
  Tensor input;
  Tensor target;
};

// Implementations must allow concurrent calls of get() / get_batch() from several threads:
// the DataLoader's workers call them in parallel.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Example `index` in [0, size()). Throws IndexError otherwise.
  virtual Example get(int64_t index) const = 0;
  // The examples at `indices`, stacked along a new leading dim. The default calls get() for
  // each index and stacks the results; override it when a faster gather exists.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
};

// A dataset held in two tensors: inputs [N, ...] and targets [N, ...] (usually [N] class ids).
// get_batch() of CPU tensors copies whole rows with memcpy.
class TensorDataset : public Dataset {
 public:
  // Throws ShapeError when the tensors are not at least 1-D or their first dims differ.
  TensorDataset(Tensor inputs, Tensor targets);

  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;   // contiguous
  Tensor targets_;  // contiguous
  int64_t size_ = 0;
};

}  // namespace gradus::data
