#include "gradus/train/save_model.h"

#include <exception>
#include <memory>
#include <unordered_map>
#include <vector>

#include "gradus/io/checkpoint.h"
#include "gradus/io/safetensors.h"
#include "gradus/ops.h"

namespace gradus::train {

void save_model(Strategy& strategy, const std::string& path,
                const std::map<std::string, std::string>& metadata) {
  GRADUS_CHECK(strategy.tensor_parallel() == nullptr && strategy.pipeline() == nullptr, ValueError,
               "train::save_model: the model is split over tensor or pipeline ranks; gather it "
               "with full_model_state()");
  // Views of the parameters: their shapes and dtypes are known while their memory is released.
  const nn::StateDict state = strategy.model().state_dict();
  const auto& items = state.items();
  const std::vector<std::vector<Tensor>> parts = strategy.parameter_parts();
  std::unordered_map<const TensorImpl*, size_t> part_of;
  for (size_t k = 0; k < parts.size(); ++k) {
    for (const Tensor& p : parts[k]) part_of.emplace(p.impl(), k + 1);
  }
  const bool writer = strategy.group().rank() == 0;
  // The state_dict's order, as io::save_module writes (the same file under every strategy).
  std::unique_ptr<io::SafetensorsWriter> file;
  std::exception_ptr open_error;
  if (writer) {
    std::vector<io::SafetensorsWriter::Entry> entries;
    for (const auto& [name, t] : items) entries.push_back({name, t.dtype(), t.sizes()});
    try {
      file = std::make_unique<io::SafetensorsWriter>(path, entries, metadata);
    } catch (...) {
      open_error = std::current_exception();
    }
  }
  // Every rank learns whether the file opened (an unwritable path) before anyone gathers.
  Tensor opened = tensor({open_error ? 0.0 : 1.0}, {1}, {.dtype = DType::f64});
  strategy.group().all_reduce(opened, dist::ReduceOp::min, "save_model: file opened")->wait();
  if (open_error) std::rethrow_exception(open_error);
  GRADUS_CHECK(opened.item() > 0, IOError, "train: data rank 0 could not create ", path);
  // Part 0 (fsdp's root: embeddings, final norm, a tied head, at both ends of the state_dict)
  // stays gathered throughout; each other part from its first tensor to the next part's (blocks
  // come one after another). Every rank walks the same order, so the gathers match. A non-finite
  // value is reported after the walk: a rank that stopped early would leave the others waiting.
  const FullParameters root = parts.empty() ? FullParameters{} : strategy.full_parameters(0);
  FullParameters current;
  size_t current_part = 0;
  std::string not_finite;
  int64_t bad = 0;
  for (const auto& [name, t] : items) {
    auto it = part_of.find(t.impl());
    const size_t part = it == part_of.end() ? 0 : it->second;  // (1 + index; 0: no part)
    if (part > 1 && part != current_part) {
      current = FullParameters{};  // (the previous part freed before the next is gathered)
      current = strategy.full_parameters(part - 1);
      current_part = part;
    }
    if (!writer) continue;
    const int64_t n = io::count_nonfinite(t);
    if (n > 0 && not_finite.empty()) {
      not_finite = name;
      bad = n;
    }
    file->write(t);
  }
  current = FullParameters{};
  if (!writer) return;
  GRADUS_CHECK(not_finite.empty(), ValueError, "train: ", path, ": not written: '", not_finite,
               "' holds ", bad, " non-finite value(s) (training diverged: lower --lr)");
  file->commit();
}

}  // namespace gradus::train
