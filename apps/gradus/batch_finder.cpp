// gradus train --batch-size auto: the largest batch whose full training step fits in memory (the
// GPU, or the CPU under --memory-limit), found with gradus::find_batch_size on a scratch copy of
// the model and optimizer, so the run itself starts from the same weights and random state as
// with that batch size given explicitly.
#include <cstdio>
#include <string>

#include "batch_finder.h"
#include "gradus/core/batch_size.h"
#include "gradus/core/cuda.h"
#include "gradus/dist/dist.h"
#include "gradus/gradus.h"
#include "gradus/io/io.h"
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
  const PhiloxState rng = default_generator().state();  // restored below: the run is unchanged
  std::shared_ptr<nn::Module> model = a.make_model();
  model->to(a.device);
  model->train();
  std::unique_ptr<optim::Optimizer> optimizer = a.make_optimizer(model->parameters());
  auto step = [&](int64_t b) {
    Shape shape = {b};
    shape.insert(shape.end(), a.example_shape.begin(), a.example_shape.end());
    const Tensor x = randn(shape, {DType::f32, a.device});
    const Tensor y = randint(0, a.classes, {b}, {DType::i64, a.device});
    optimizer->zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(a.amp.value_or(DType::bf16), a.amp.has_value());
      loss = cross_entropy((*model)(x), y);
    }
    loss.backward();
    optimizer->step();
    (void)cross_entropy((*model)(x), y).item();  // waits for the device
  };
  BatchSizeResult r = find_batch_size(step, {.start = 16, .max = a.max_per_rank});
  optimizer.reset();
  model.reset();
  default_generator().set_state(rng);
  if (a.device.is_cuda()) cuda::empty_cache();

  std::string tried;
  for (const auto& [size, ok] : r.tried) {
    tried += (tried.empty() ? "" : ", ") + std::to_string(size) + (ok ? " fits" : " does not");
  }
  int64_t per_rank = r.batch_size;
  if (a.world_size > 1) {
    // Every rank takes the same share: the smallest any rank can hold.
    Tensor t = from_vector(std::vector<int64_t>{per_rank}, {1}, {.dtype = DType::i64});
    dist::default_group()->all_reduce(t, dist::ReduceOp::min, "auto batch size")->wait();
    per_rank = t.to_vector<int64_t>()[0];
  }
  const int64_t global = per_rank * a.world_size;
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
