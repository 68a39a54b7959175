// Learning-rate schedulers. Each computes PyTorch's closed form lr(epoch, base_lr) for every
// param group, so a scheduler's whole state is last_epoch plus the base learning rates:
// checkpointing is exact and resuming does not depend on the history of calls.
//
// Like PyTorch, constructing a scheduler performs the initial step (last_epoch becomes 0 and the
// optimizer's lr is set to lr(0)); call step() once per epoch (or iteration) after
// optimizer.step(). Base lrs are the optimizer's lrs at construction.
//
// LinearWarmup composes: it ramps linearly for `warmup_steps` and then defers to another
// scheduler whose epoch count starts at 0 when the warmup ends (PyTorch's
// SequentialLR([LinearLR(start_factor, 1, warmup), after], milestones=[warmup])).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gradus/optim/optimizer.h"

namespace gradus::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch and writes the new lrs into the optimizer.
  void step();
  // The lrs set by the last step (one per param group).
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // The closed form: lr of a group with base lr `base_lr` at `epoch` (>= 0).
  virtual double lr_at(int64_t epoch, double base_lr) const = 0;
  virtual const char* type_name() const = 0;

  // {"last_epoch": e, "base_lr.<g>": ...}; load_state_dict restores them and re-applies lr(e).
  virtual std::map<std::string, double> state_dict() const;
  virtual void load_state_dict(const std::map<std::string, double>& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Called at the end of each subclass constructor: the initial step (epoch 0).
  void initial_step();
  void apply();

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
};

// lr = base * gamma^floor(epoch / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch, double base_lr) const override;
  const char* type_name() const override { return "StepLR"; }

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base * gamma^(number of milestones <= epoch)
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  double lr_at(int64_t epoch, double base_lr) const override;
  const char* type_name() const override { return "MultiStepLR"; }

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// lr = base * gamma^epoch
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  double lr_at(int64_t epoch, double base_lr) const override;
  const char* type_name() const override { return "ExponentialLR"; }

 private:
  double gamma_;
};

// lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  double lr_at(int64_t epoch, double base_lr) const override;
  const char* type_name() const override { return "CosineAnnealingLR"; }

 private:
  int64_t t_max_;
  double eta_min_;
};

// PyTorch's LinearLR: lr = base * (start + (end - start) * min(epoch, total_iters) / total_iters)
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           int64_t total_iters = 5);
  double lr_at(int64_t epoch, double base_lr) const override;
  const char* type_name() const override { return "LinearLR"; }

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// A constant lr (what LinearWarmup defers to when given no scheduler).
class ConstantLR : public LRScheduler {
 public:
  explicit ConstantLR(Optimizer& optimizer);
  double lr_at(int64_t, double base_lr) const override { return base_lr; }
  const char* type_name() const override { return "ConstantLR"; }
};

// epoch < warmup_steps: base * (start_factor + (1 - start_factor) * epoch / warmup_steps);
// afterwards: after->lr_at(epoch - warmup_steps, base). `after` must drive the same optimizer
// (it is only used for its closed form; LinearWarmup alone writes the lr). nullptr = constant.
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor = 0.01,
               std::shared_ptr<LRScheduler> after = nullptr);
  double lr_at(int64_t epoch, double base_lr) const override;
  const char* type_name() const override { return "LinearWarmup"; }

 private:
  int64_t warmup_steps_;
  double start_factor_;
  std::shared_ptr<LRScheduler> after_;
};

// The linear scaling rule for large batches (Goyal et al.): base_lr * batch / base_batch.
double scale_lr_for_batch(double base_lr, int64_t batch_size, int64_t base_batch_size = 256);

}  // namespace gradus::optim
