// What the library's training loop costs over a hand-written one: the same model, data, optimizer
// and schedule trained one epoch by train::Trainer and by the five-line loop (zero_grad, forward,
// loss, backward, step; the loss read every step, as the Trainer does on a CPU), alternating,
// medians of the repeats.
//
//   example_trainer_overhead [repeats=7] [model=mlp] [examples=6400] [batch=64]
//
// Prints one JSON line; "ratio" is Trainer time / hand-written time (1.0: no overhead).
#include <gradus/gradus.h>
#include <gradus/nn/models.h>
#include <gradus/train/train.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace gradus;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::unique_ptr<optim::Optimizer> make_adam(std::vector<Tensor> p) {
  return std::make_unique<optim::AdamW>(std::move(p), optim::AdamWOptions{.lr = 1e-3});
}

}  // namespace

int main(int argc, char** argv) try {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 7;
  const std::string model_name = argc > 2 ? argv[2] : "mlp";
  const int64_t n = argc > 3 ? std::atoll(argv[3]) : 6400;
  const int64_t batch = argc > 4 ? std::atoll(argv[4]) : 64;
  const Shape example = model_name == "mlp" ? Shape{784} : Shape{1, 28, 28};
  Shape all = example;
  all.insert(all.begin(), n);
  manual_seed(3);
  auto dataset =
      std::make_shared<data::TensorDataset>(rand(all), randint(0, 10, {n}, {.dtype = DType::i64}));
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };

  auto by_trainer = [&] {
    manual_seed(1);
    train::Trainer trainer(nn::make_model(model_name), make_adam,
                           std::make_shared<train::ClassificationTask>());
    data::DataLoader loader(dataset, {.batch_size = batch, .shuffle = true, .seed = 5});
    const Clock::time_point t0 = Clock::now();
    trainer.fit(loader);
    return seconds_since(t0);
  };
  auto by_hand = [&] {
    manual_seed(1);
    std::shared_ptr<nn::Module> model = nn::make_model(model_name);
    auto opt = make_adam(model->parameters());
    data::DataLoader loader(dataset, {.batch_size = batch, .shuffle = true, .seed = 5});
    const Clock::time_point t0 = Clock::now();
    double loss_sum = 0;
    for (data::Example& b : loader) {
      opt->zero_grad();
      const Tensor loss = cross_entropy((*model)(b.input), b.target);
      loss.backward();
      opt->step();
      loss_sum += loss.item();
    }
    const double t = seconds_since(t0);
    if (!(loss_sum > 0)) std::fprintf(stderr, "unexpected loss sum %g\n", loss_sum);
    return t;
  };
  by_trainer();  // warm-up: the thread pool, the allocator's caches
  by_hand();
  std::vector<double> trainer_s, hand_s, ratios;
  for (int r = 0; r < repeats; ++r) {
    const bool trainer_first = r % 2 == 0;
    const double a = trainer_first ? by_trainer() : by_hand();
    const double b = trainer_first ? by_hand() : by_trainer();
    trainer_s.push_back(trainer_first ? a : b);
    hand_s.push_back(trainer_first ? b : a);
    ratios.push_back(trainer_s.back() / hand_s.back());
  }
  const double steps = static_cast<double>((n + batch - 1) / batch);
  std::printf(
      "{\"benchmark\": \"trainer_overhead\", \"model\": \"%s\", \"batch\": %lld, \"steps\": %.0f, "
      "\"threads\": %d, \"trainer_ms_per_step\": %.4f, \"hand_ms_per_step\": %.4f, "
      "\"ratio\": %.4f, \"median_pair_ratio\": %.4f, \"repeats\": %d}\n",
      model_name.c_str(), static_cast<long long>(batch), steps, get_num_threads(),
      median(trainer_s) / steps * 1e3, median(hand_s) / steps * 1e3,
      median(trainer_s) / median(hand_s), median(ratios), repeats);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
