// Dataset's default batch gather and the in-memory TensorDataset.
#include "gradus/data/dataset.h"

#include <cstring>

#include "gradus/core/error.h"
#include "gradus/ops.h"

namespace gradus::data {

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Tensor> inputs, targets;
  inputs.reserve(indices.size());
  targets.reserve(indices.size());
  for (int64_t i : indices) {
    Example e = get(i);
    inputs.push_back(std::move(e.input));
    targets.push_back(std::move(e.target));
  }
  GRADUS_CHECK(!inputs.empty(), ValueError, "Dataset::get_batch: empty list of indices");
  return {stack(inputs, 0), stack(targets, 0)};
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) {
  GRADUS_CHECK(inputs.defined() && targets.defined(), ValueError,
               "TensorDataset: inputs and targets must be defined tensors");
  GRADUS_CHECK(inputs.dim() >= 1 && targets.dim() >= 1, ShapeError,
               "TensorDataset: inputs and targets need a leading example dim, got inputs ",
               shape_str(inputs.sizes()), " and targets ", shape_str(targets.sizes()));
  GRADUS_CHECK(inputs.size(0) == targets.size(0), ShapeError, "TensorDataset: inputs ",
               shape_str(inputs.sizes()), " and targets ", shape_str(targets.sizes()),
               " hold different numbers of examples (", inputs.size(0), " vs ", targets.size(0),
               ")");
  // The dataset holds data, not a graph: drop any history.
  inputs_ = inputs.detach().contiguous();
  targets_ = targets.detach().contiguous();
  size_ = inputs_.size(0);
}

namespace {

void check_index(int64_t index, int64_t size) {
  GRADUS_CHECK(index >= 0 && index < size, IndexError, "TensorDataset: index ", index,
               " is out of range for a dataset of ", size, " examples");
}

// Rows `indices` of contiguous t (dim 0) as a new contiguous tensor [indices.size(), ...].
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& indices) {
  Shape shape = t.sizes();
  shape[0] = static_cast<int64_t>(indices.size());
  if (!t.device().is_cpu()) {
    // Off the host a row copy per index would be one transfer each: use the gather op.
    std::vector<int64_t> idx(indices);
    return index_select(
        t, 0,
        from_vector(idx, {static_cast<int64_t>(idx.size())}, {DType::i64, t.device(), false}));
  }
  Tensor out = empty(shape, {t.dtype(), t.device(), false});
  const size_t row_bytes =
      static_cast<size_t>(t.size(0) == 0 ? 0 : t.numel() / t.size(0)) * t.element_size();
  const char* src = static_cast<const char*>(t.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (size_t r = 0; r < indices.size(); ++r) {
    std::memcpy(dst + r * row_bytes, src + static_cast<size_t>(indices[r]) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace

Example TensorDataset::get(int64_t index) const {
  check_index(index, size_);
  return {inputs_.select(0, index), targets_.select(0, index)};
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  GRADUS_CHECK(!indices.empty(), ValueError, "TensorDataset::get_batch: empty list of indices");
  for (int64_t i : indices) check_index(i, size_);
  return {gather_rows(inputs_, indices), gather_rows(targets_, indices)};
}

}  // namespace gradus::data
