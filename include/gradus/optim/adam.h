// Adam and AdamW with exactly PyTorch's update (torch.optim.Adam / AdamW, single-tensor form):
//   step += 1; g = grad (negated if maximize)
//   Adam:  g += weight_decay * p            AdamW: p *= 1 - lr * weight_decay
//   m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   v_hat = amsgrad ? (v_max = max(v_max, v)) : v
//   p -= lr / (1 - beta1^step) * m / (sqrt(v_hat) / sqrt(1 - beta2^step) + eps)
// State per parameter: step, exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad).
#pragma once

#include <utility>
#include <vector>

#include "gradus/optim/optimizer.h"

namespace gradus::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
};

// AdamW's defaults differ only in weight_decay.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

class Adam : public Optimizer {
 public:
  // Throws ValueError for lr < 0, eps < 0, betas outside [0, 1) or weight_decay < 0.
  explicit Adam(std::vector<Tensor> params, AdamOptions options = {});
  explicit Adam(std::vector<ParamGroup<AdamOptions>> groups);

  void step() override;
  const char* type_name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  double group_lr(size_t group) const override;
  void set_group_lr(size_t group, double lr) override;
  const AdamOptions& options(size_t group = 0) const;
  void set_options(size_t group, const AdamOptions& options);

 protected:
  Adam(std::vector<ParamGroup<AdamOptions>> groups, bool decoupled_weight_decay);
  std::map<std::string, double> group_options(size_t group) const override;
  void set_group_options(size_t group, const std::map<std::string, double>& values) override;

 private:
  void validate(const AdamOptions& o) const;
  std::vector<AdamOptions> options_;
  bool decoupled_ = false;
};

// Adam with decoupled weight decay (Loshchilov & Hutter).
class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  explicit AdamW(std::vector<ParamGroup<AdamWOptions>> groups);
};

}  // namespace gradus::optim
