// gradus train --batch-size auto: the largest batch whose full training step fits in memory (the
// GPU, or the CPU under --memory-limit), found by the training layer (train::choose_batch_size,
// on a scratch copy of the model and optimizer); a resumed run keeps its own.
#include <cstdio>
#include <string>

#include "batch_finder.h"
#include "gradus/core/batch_size.h"
#include "gradus/core/cuda.h"
#include "gradus/dist/dist.h"
#include "gradus/gradus.h"
#include "gradus/io/io.h"
#include "gradus/train/batch_finder.h"
#include "nlohmann/json.hpp"

namespace gradus::cli {

namespace {

// The batch size stored in the newest checkpoint's run configuration (0: none).
int64_t checkpoint_batch_size(const std::string& dir) {
  const auto all = io::list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      const io::SafetensorsHeader h = io::read_safetensors_header(it->second);
      auto cfg = h.metadata.find("config");
      if (cfg == h.metadata.end()) continue;
      const nlohmann::json j = nlohmann::json::parse(cfg->second);
      if (j.contains("batch_size") && j["batch_size"].is_number_integer()) {
        return j["batch_size"].get<int64_t>();
      }
    } catch (const std::exception&) {
      continue;  // the resume reports damaged files
    }
  }
  return 0;
}

}  // namespace

int64_t auto_batch_size(const AutoBatchArgs& a) {
  // A resumed run keeps its batch size: the data position in the checkpoint depends on it.
  if (a.resume && !a.checkpoint_dir.empty()) {
    if (const int64_t b = checkpoint_batch_size(a.checkpoint_dir); b > 0) {
      std::fprintf(stderr,
                   "gradus train: --batch-size auto: resuming with the run's batch size %lld\n",
                   static_cast<long long>(b));
      return b;
    }
  }
  const train::BatchSizeChoice choice = train::choose_batch_size(
      {.make_model = a.make_model,
       .make_optimizer = a.make_optimizer,
       .task = std::make_shared<train::ClassificationTask>(),
       .make_batch =
           [&](int64_t rows) {
             Shape shape = {rows};
             shape.insert(shape.end(), a.example_shape.begin(), a.example_shape.end());
             return data::Example{randn(shape), randint(0, a.classes, {rows}, {DType::i64})};
           },
       .device = a.device,
       .amp = a.amp,
       .max_per_rank = a.max_per_rank,
       .group = a.world_size > 1 ? dist::default_group() : nullptr});
  const BatchSizeResult& r = choice.search;
  std::string tried;
  for (const auto& [size, ok] : r.tried) {
    tried += (tried.empty() ? "" : ", ") + std::to_string(size) + (ok ? " fits" : " does not");
  }
  const int64_t per_rank = choice.per_rank, global = choice.global;
  const std::string why = r.smallest_fail == 0
                              ? "every size up to the training set fits"
                              : "90% of the largest that fits, " + std::to_string(r.largest_fit);
  std::fprintf(stderr, "gradus train: --batch-size auto: %s; using %lld%s (%s)\n", tried.c_str(),
               static_cast<long long>(global),
               a.world_size > 1 ? (" (" + std::to_string(per_rank) + " per rank)").c_str() : "",
               why.c_str());
  return global;
}

}  // namespace gradus::cli
