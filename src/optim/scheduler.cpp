// Learning-rate schedulers (closed forms of PyTorch's).
#include "gradus/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "gradus/core/error.h"

namespace gradus::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g)
    base_lrs_.push_back(optimizer.group_lr(g));
}

void LRScheduler::initial_step() {
  last_epoch_ = -1;
  step();
}

void LRScheduler::step() {
  ++last_epoch_;
  apply();
}

void LRScheduler::apply() {
  last_lr_.clear();
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    const double lr = lr_at(last_epoch_, base_lrs_[g]);
    optimizer_.set_group_lr(g, lr);
    last_lr_.push_back(lr);
  }
}

std::map<std::string, double> LRScheduler::state_dict() const {
  std::map<std::string, double> out{{"last_epoch", static_cast<double>(last_epoch_)}};
  for (size_t g = 0; g < base_lrs_.size(); ++g) out["base_lr." + std::to_string(g)] = base_lrs_[g];
  return out;
}

void LRScheduler::load_state_dict(const std::map<std::string, double>& state) {
  const std::string op = std::string(type_name()) + "::load_state_dict";
  auto it = state.find("last_epoch");
  GRADUS_CHECK(it != state.end(), ValueError, op, ": missing \"last_epoch\"");
  GRADUS_CHECK(it->second >= 0, ValueError, op, ": last_epoch must be >= 0, got ", it->second);
  std::vector<double> base = base_lrs_;
  for (size_t g = 0; g < base.size(); ++g) {
    auto b = state.find("base_lr." + std::to_string(g));
    GRADUS_CHECK(b != state.end(), ValueError, op, ": missing \"base_lr.", g,
                 "\" (the optimizer has ", base.size(), " param groups)");
    base[g] = b->second;
  }
  GRADUS_CHECK(!state.count("base_lr." + std::to_string(base.size())), ValueError, op,
               ": the state has more base lrs than the optimizer's ", base.size(), " param groups");
  base_lrs_ = std::move(base);
  last_epoch_ = static_cast<int64_t>(it->second);
  apply();
}

// ------------------------------------------------------------------------------------ schedules
StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  GRADUS_CHECK(step_size > 0, ValueError, "StepLR: step_size must be positive, got ", step_size);
  initial_step();
}

double StepLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

double MultiStepLR::lr_at(int64_t epoch, double base_lr) const {
  // bisect_right: milestones equal to epoch count as passed.
  const auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base_lr * std::pow(gamma_, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer), gamma_(gamma) {
  initial_step();
}

double ExponentialLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  GRADUS_CHECK(T_max > 0, ValueError, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  initial_step();
}

double CosineAnnealingLR::lr_at(int64_t epoch, double base_lr) const {
  return eta_min_ + (base_lr - eta_min_) *
                        (1.0 + std::cos(std::numbers::pi * static_cast<double>(epoch) /
                                        static_cast<double>(t_max_))) /
                        2.0;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  GRADUS_CHECK(start_factor > 0 && start_factor <= 1, ValueError,
               "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  GRADUS_CHECK(end_factor >= 0 && end_factor <= 1, ValueError,
               "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  GRADUS_CHECK(total_iters > 0, ValueError, "LinearLR: total_iters must be positive, got ",
               total_iters);
  initial_step();
}

double LinearLR::lr_at(int64_t epoch, double base_lr) const {
  const double t =
      static_cast<double>(std::min(epoch, total_iters_)) / static_cast<double>(total_iters_);
  return base_lr * (start_factor_ + (end_factor_ - start_factor_) * t);
}

ConstantLR::ConstantLR(Optimizer& optimizer) : LRScheduler(optimizer) {
  initial_step();
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor,
                           std::shared_ptr<LRScheduler> after)
    : LRScheduler(optimizer),
      warmup_steps_(warmup_steps),
      start_factor_(start_factor),
      after_(std::move(after)) {
  GRADUS_CHECK(warmup_steps >= 0, ValueError, "LinearWarmup: warmup_steps must be >= 0, got ",
               warmup_steps);
  GRADUS_CHECK(start_factor >= 0 && start_factor <= 1, ValueError,
               "LinearWarmup: start_factor must be in [0, 1], got ", start_factor);
  // The wrapped scheduler already moved the optimizer's lr to its own epoch-0 value; the base
  // lrs are the ones it recorded before doing so.
  if (after_) {
    GRADUS_CHECK(after_->base_lrs().size() == base_lrs_.size(), ValueError,
                 "LinearWarmup: the wrapped ", after_->type_name(), " drives ",
                 after_->base_lrs().size(), " param groups but this optimizer has ",
                 base_lrs_.size());
    base_lrs_ = after_->base_lrs();
  }
  initial_step();
}

double LinearWarmup::lr_at(int64_t epoch, double base_lr) const {
  if (epoch < warmup_steps_) {
    return base_lr * (start_factor_ + (1.0 - start_factor_) * static_cast<double>(epoch) /
                                          static_cast<double>(warmup_steps_));
  }
  return after_ ? after_->lr_at(epoch - warmup_steps_, base_lr) : base_lr;
}

double scale_lr_for_batch(double base_lr, int64_t batch_size, int64_t base_batch_size) {
  GRADUS_CHECK(batch_size > 0 && base_batch_size > 0, ValueError,
               "scale_lr_for_batch: batch sizes must be positive, got ", batch_size, " and ",
               base_batch_size);
  return base_lr * static_cast<double>(batch_size) / static_cast<double>(base_batch_size);
}

}  // namespace gradus::optim
