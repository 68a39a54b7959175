// gradus train: a classifier on (Fashion-)MNIST with a seeded loader, a per-step LR schedule, a
// progress bar, per-epoch evaluation and JSONL metrics. The last line of stdout is
// "test_accuracy=<value>" so scripts can read the result.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gradus/gradus.h"
#include "gradus/nn/models.h"
#include "gradus/optim/optim.h"
#include "progress.h"

namespace gradus::cli {

namespace {

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, nn::Module& model) {
  const bool default_decay = o.weight_decay < 0;
  if (o.optimizer == "sgd") {
    optim::SGDOptions opts{.lr = o.lr, .momentum = o.momentum};
    if (!default_decay) opts.weight_decay = o.weight_decay;
    return std::make_unique<optim::SGD>(model.parameters(), opts);
  }
  if (o.optimizer == "adam") {
    optim::AdamOptions opts{.lr = o.lr};
    if (!default_decay) opts.weight_decay = o.weight_decay;
    return std::make_unique<optim::Adam>(model.parameters(), opts);
  }
  if (o.optimizer == "adamw") {
    optim::AdamWOptions opts{.lr = o.lr};
    if (!default_decay) opts.weight_decay = o.weight_decay;
    return std::make_unique<optim::AdamW>(model.parameters(), opts);
  }
  throw ValueError("train: unknown optimizer '" + o.optimizer + "' (expected sgd, adam or adamw)");
}

// The per-step LR schedule (stepped after every optimizer step): a linear warm-up over
// warmup_steps (from 1% of --lr), then constant (none), a half cosine down to 0 over the remaining
// steps (cosine), or a drop by step_gamma every step_epochs epochs (step). nullptr = constant.
std::shared_ptr<optim::LRScheduler> make_scheduler(const TrainOptions& o,
                                                   optim::Optimizer& optimizer, int64_t total_steps,
                                                   int64_t steps_per_epoch) {
  std::shared_ptr<optim::LRScheduler> after;
  if (o.scheduler == "cosine") {
    after = std::make_shared<optim::CosineAnnealingLR>(
        optimizer, std::max<int64_t>(1, total_steps - o.warmup_steps));
  } else if (o.scheduler == "step") {
    const int every = o.step_epochs > 0 ? o.step_epochs : std::max(1, o.epochs / 3);
    after = std::make_shared<optim::StepLR>(optimizer, every * steps_per_epoch, o.step_gamma);
  }
  if (o.warmup_steps > 0) {
    return std::make_shared<optim::LinearWarmup>(optimizer, o.warmup_steps, 0.01, after);
  }
  return after;
}

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
};

EvalResult evaluate(nn::Module& model, data::DataLoader& loader) {
  NoGradGuard no_grad;
  model.eval();
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  CrossEntropyOptions summed;
  summed.reduction = Reduction::sum;
  loader.set_epoch(0);
  for (data::Example& batch : loader) {
    const Tensor logits = model(batch.input);
    loss_sum += cross_entropy(logits, batch.target, summed).item();
    correct += static_cast<int64_t>(eq(argmax(logits, 1), batch.target).sum().item());
    count += batch.target.size(0);
  }
  model.train();
  return {loss_sum / static_cast<double>(std::max<int64_t>(count, 1)),
          static_cast<double>(correct) / static_cast<double>(std::max<int64_t>(count, 1))};
}

}  // namespace

int run_train(const TrainOptions& o) {
  apply_threads(o.threads);
  const Device device = resolve_device(o.device);
  manual_seed(o.seed);

  // Fail on an unwritable metrics file before spending time on training.
  std::ofstream metrics;
  if (!o.metrics.empty()) {
    metrics.open(o.metrics, std::ios::app);
    GRADUS_CHECK(metrics.good(), IOError, "train: cannot open the metrics file '", o.metrics,
                 "' for appending");
  }

  const bool mnist = o.data == "mnist";
  GRADUS_CHECK(!mnist || !o.data_dir.empty(), ValueError,
               "train: --data mnist needs --data-dir DIR (a directory with MNIST's four "
               "*-ubyte.gz files)");
  const std::string dir = o.data_dir.empty() ? data::kDefaultFashionMnistDir : o.data_dir;
  auto load = [&](bool train, int64_t limit) {
    return mnist ? data::load_mnist(dir, train, limit)
                 : data::load_fashion_mnist(dir, train, limit);
  };
  std::shared_ptr<data::TensorDataset> train_set = load(true, o.limit_train);
  std::shared_ptr<data::TensorDataset> test_set = load(false, o.limit_test);

  std::shared_ptr<nn::Module> model = nn::make_model(o.model);
  model->to(device);
  model->train();
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(o, *model);

  data::DataLoader train_loader(train_set, {.batch_size = o.batch_size,
                                            .shuffle = true,
                                            .seed = o.seed,
                                            .device = device,
                                            .num_workers = o.workers});
  data::DataLoader test_loader(test_set, {.batch_size = std::max<int64_t>(o.batch_size, 500),
                                          .device = device,
                                          .num_workers = o.workers});
  const int64_t steps_per_epoch = train_loader.size();
  const int64_t total_steps = steps_per_epoch * o.epochs;
  std::fprintf(stderr,
               "gradus train: model %s (%lld parameters), %s %lld train / %lld test examples, "
               "device %s, %d threads, %s lr %g, batch %lld, %d epochs\n",
               o.model.c_str(), static_cast<long long>(model->num_parameters()), o.data.c_str(),
               static_cast<long long>(train_set->size()), static_cast<long long>(test_set->size()),
               device.str().c_str(), get_num_threads(), o.optimizer.c_str(), o.lr,
               static_cast<long long>(o.batch_size), o.epochs);

  const std::shared_ptr<optim::LRScheduler> scheduler =
      make_scheduler(o, *optimizer, total_steps, steps_per_epoch);

  EvalResult result;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    train_loader.set_epoch(epoch);
    Progress bar("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(o.epochs),
                 steps_per_epoch, !o.no_progress);
    double loss_sum = 0;  // sum over examples of this epoch
    int64_t samples = 0, batch_index = 0;
    double lr = optimizer->lr();
    for (data::Example& batch : train_loader) {
      lr = optimizer->lr();
      optimizer->zero_grad();
      const Tensor loss = cross_entropy((*model)(batch.input), batch.target);
      loss.backward();
      optimizer->step();
      if (scheduler) scheduler->step();
      const double value = loss.item();
      GRADUS_CHECK(std::isfinite(value), ValueError, "train: the loss became ", value, " at epoch ",
                   epoch + 1, ", step ", batch_index + 1, ": training diverged; lower --lr (now ",
                   lr, ") or add --warmup-steps");
      const int64_t n = batch.target.size(0);
      loss_sum += value * static_cast<double>(n);
      samples += n;
      bar.update(++batch_index, loss_sum / static_cast<double>(samples), samples);
    }
    bar.finish();
    const double train_seconds = bar.elapsed_seconds();
    result = evaluate(*model, test_loader);
    const double epoch_seconds = bar.elapsed_seconds();
    const double samples_per_s = static_cast<double>(samples) / std::max(train_seconds, 1e-9);
    const double train_loss = loss_sum / static_cast<double>(std::max<int64_t>(samples, 1));
    std::printf(
        "epoch %d/%d train_loss %.4f test_loss %.4f test_accuracy %.4f (%.1f s, %.0f "
        "samples/s, lr %.3g)\n",
        epoch + 1, o.epochs, train_loss, result.loss, result.accuracy, epoch_seconds, samples_per_s,
        lr);
    std::fflush(stdout);
    if (metrics.is_open()) {
      const nlohmann::ordered_json line = {{"epoch", epoch + 1},
                                           {"train_loss", train_loss},
                                           {"test_loss", result.loss},
                                           {"test_accuracy", result.accuracy},
                                           {"epoch_seconds", epoch_seconds},
                                           {"samples_per_s", samples_per_s},
                                           {"lr", lr},
                                           {"model", o.model},
                                           {"device", device.str()}};
      metrics << line.dump() << '\n';
      metrics.flush();
      GRADUS_CHECK(metrics.good(), IOError, "train: writing the metrics file '", o.metrics,
                   "' failed");
    }
  }
  std::printf("test_accuracy=%.4f\n", result.accuracy);
  return 0;
}

}  // namespace gradus::cli
