#include "train_setup.h"

#include <algorithm>

namespace gradus::cli {

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainOptions& o, double lr,
                                                 std::vector<Tensor> params) {
  const bool default_decay = o.weight_decay < 0;
  if (o.optimizer == "sgd") {
    optim::SGDOptions opts{.lr = lr, .momentum = o.momentum};
    if (!default_decay) opts.weight_decay = o.weight_decay;
    return std::make_unique<optim::SGD>(params, opts);
  }
  if (o.optimizer == "adam") {
    optim::AdamOptions opts{.lr = lr};
    if (!default_decay) opts.weight_decay = o.weight_decay;
    return std::make_unique<optim::Adam>(params, opts);
  }
  if (o.optimizer == "adamw") {
    optim::AdamWOptions opts{.lr = lr};
    if (!default_decay) opts.weight_decay = o.weight_decay;
    return std::make_unique<optim::AdamW>(params, opts);
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

void check_image_data_options(const TrainOptions& o) {
  GRADUS_CHECK(o.data != "mnist" || !o.data_dir.empty(), ValueError,
               "train: --data mnist needs --data-dir DIR (a directory with MNIST's four "
               "*-ubyte.gz files)");
}

std::shared_ptr<data::TensorDataset> load_image_split(const TrainOptions& o, bool train) {
  const std::string dir = o.data_dir.empty() ? data::kDefaultFashionMnistDir : o.data_dir;
  const int64_t limit = train ? o.limit_train : o.limit_test;
  const bool normalise = !train || !o.augment;
  return o.data == "mnist" ? data::load_mnist(dir, train, limit, normalise)
                           : data::load_fashion_mnist(dir, train, limit, normalise);
}

void refuse_options_not_in(const TrainOptions& o, const char* task,
                           std::initializer_list<const char*> honoured) {
  std::string refused;
  for (const std::string& name : o.given) {
    bool ok = false;
    for (const char* h : honoured) ok = ok || name == h;
    if (!ok) refused += (refused.empty() ? "--" : ", --") + name;
  }
  GRADUS_CHECK(refused.empty(), ValueError, "train: ", refused,
               (refused.find(',') == std::string::npos ? " is" : " are"), " not supported by ",
               task, " (--model ", o.model, ")");
}

}  // namespace gradus::cli
