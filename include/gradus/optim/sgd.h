// Stochastic gradient descent with momentum, dampening, weight decay and Nesterov momentum,
// with exactly PyTorch's update (torch.optim.SGD):
//   g = grad (negated if maximize) + weight_decay * p
//   buf = g on the first step, else momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf          (when momentum != 0)
//   p -= lr * g
#pragma once

#include <vector>

#include "gradus/optim/optimizer.h"

namespace gradus::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

class SGD : public Optimizer {
 public:
  // Throws ValueError for lr < 0, momentum < 0, weight_decay < 0, or nesterov without momentum
  // (or with dampening).
  explicit SGD(std::vector<Tensor> params, SGDOptions options = {});
  explicit SGD(std::vector<ParamGroup<SGDOptions>> groups);

  void step() override;
  const char* type_name() const override { return "SGD"; }
  double group_lr(size_t group) const override;
  void set_group_lr(size_t group, double lr) override;
  const SGDOptions& options(size_t group = 0) const;
  // Replaces a group's hyperparameters (validated).
  void set_options(size_t group, const SGDOptions& options);

 protected:
  std::map<std::string, double> group_options(size_t group) const override;
  void set_group_options(size_t group, const std::map<std::string, double>& values) override;

 private:
  std::vector<SGDOptions> options_;
};

}  // namespace gradus::optim
