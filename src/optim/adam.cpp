// Adam / AdamW: validation, option (de)serialisation and the fused step.
#include "gradus/optim/adam.h"

#include "gradus/autograd.h"
#include "gradus/core/profiling.h"
#include "optim/common.h"

namespace gradus::optim {

namespace {
std::vector<ParamGroup<AdamOptions>> to_adam(std::vector<ParamGroup<AdamWOptions>> groups) {
  std::vector<ParamGroup<AdamOptions>> out;
  for (auto& g : groups) {
    const AdamWOptions& w = g.options;
    out.push_back({std::move(g.params),
                   AdamOptions{w.lr, w.betas, w.eps, w.weight_decay, w.amsgrad, w.maximize}});
  }
  return out;
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::vector<ParamGroup<AdamOptions>>{{std::move(params), options}}, false) {}

Adam::Adam(std::vector<ParamGroup<AdamOptions>> groups) : Adam(std::move(groups), false) {}

Adam::Adam(std::vector<ParamGroup<AdamOptions>> groups, bool decoupled) : decoupled_(decoupled) {
  GRADUS_CHECK(!groups.empty(), ValueError, type_name(), ": got no parameter groups");
  for (auto& g : groups) {
    validate(g.options);
    add_group(std::move(g.params));
    options_.push_back(g.options);
  }
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam(to_adam({{std::move(params), options}}), true) {}

AdamW::AdamW(std::vector<ParamGroup<AdamWOptions>> groups)
    : Adam(to_adam(std::move(groups)), true) {}

void Adam::validate(const AdamOptions& o) const {
  const char* op = type_name();
  GRADUS_CHECK(o.lr >= 0, ValueError, op, ": invalid learning rate ", o.lr, " (must be >= 0)");
  GRADUS_CHECK(o.eps >= 0, ValueError, op, ": invalid epsilon ", o.eps, " (must be >= 0)");
  GRADUS_CHECK(o.betas.first >= 0 && o.betas.first < 1, ValueError, op,
               ": invalid beta parameter at index 0: ", o.betas.first, " (must be in [0, 1))");
  GRADUS_CHECK(o.betas.second >= 0 && o.betas.second < 1, ValueError, op,
               ": invalid beta parameter at index 1: ", o.betas.second, " (must be in [0, 1))");
  GRADUS_CHECK(o.weight_decay >= 0, ValueError, op, ": invalid weight_decay ", o.weight_decay,
               " (must be >= 0)");
}

double Adam::group_lr(size_t group) const {
  return options(group).lr;
}

void Adam::set_group_lr(size_t group, double lr) {
  AdamOptions o = options(group);
  o.lr = lr;
  set_options(group, o);
}

const AdamOptions& Adam::options(size_t group) const {
  GRADUS_CHECK(group < options_.size(), IndexError, type_name(), ": param group ", group,
               " does not exist (", options_.size(), " groups)");
  return options_[group];
}

void Adam::set_options(size_t group, const AdamOptions& o) {
  options(group);  // range check
  validate(o);
  options_[group] = o;
  write_device_lr(group, o.lr);  // capturable mode only
}

std::map<std::string, double> Adam::group_options(size_t group) const {
  const AdamOptions& o = options(group);
  return {{"lr", o.lr},
          {"beta1", o.betas.first},
          {"beta2", o.betas.second},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

void Adam::set_group_options(size_t group, const std::map<std::string, double>& v) {
  AdamOptions o = options(group);
  for (const auto& [k, x] : v) {
    if (k == "lr")
      o.lr = x;
    else if (k == "beta1")
      o.betas.first = x;
    else if (k == "beta2")
      o.betas.second = x;
    else if (k == "eps")
      o.eps = x;
    else if (k == "weight_decay")
      o.weight_decay = x;
    else if (k == "amsgrad")
      o.amsgrad = x != 0;
    else if (k == "maximize")
      o.maximize = x != 0;
    else
      throw ValueError(std::string(type_name()) + "::load_state_dict: unknown option \"" + k +
                       "\"");
  }
  set_options(group, o);
}

void Adam::step() {
  GRADUS_PROFILE_SCOPE_NAMED(optimizer, std::string(type_name()) + ".step");
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const AdamOptions& o = options_[g];
    // Bias correction depends on each parameter's own step count (a parameter that had no
    // gradient on some steps lags behind), so parameters are bucketed by their next step.
    // Capturable mode counts steps per group on the device: one bucket, one count.
    auto buckets = detail::make_buckets(type_name(), groups_[g], [&](size_t i) -> int64_t {
      return capturable() ? 0 : state_[g][i].step + 1;
    });
    const double* device_scalars =
        capturable() && !buckets.empty() ? advance_device_step(g) : nullptr;
    for (auto& b : buckets) {
      std::vector<Tensor> exp_avg, exp_avg_sq, max_exp_avg_sq;
      for (size_t i : b.indices) {
        exp_avg.push_back(state_tensor(g, i, "exp_avg"));
        exp_avg_sq.push_back(state_tensor(g, i, "exp_avg_sq"));
        if (o.amsgrad) max_exp_avg_sq.push_back(state_tensor(g, i, "max_exp_avg_sq"));
        // Capturable: the device's count rules (state_dict reads it); this one counts calls.
        state_[g][i].step = device_scalars != nullptr ? state_[g][i].step + 1 : b.key;
      }
      backend::AdamArgs args;
      args.lr = o.lr;
      args.beta1 = o.betas.first;
      args.beta2 = o.betas.second;
      args.eps = o.eps;
      args.weight_decay = o.weight_decay;
      args.decoupled_weight_decay = decoupled_;
      args.amsgrad = o.amsgrad;
      args.maximize = o.maximize;
      args.step = b.key;
      args.device_scalars = device_scalars;
      backend::backend_for(b.device.type())
          .adam_step(b.params, b.grads, exp_avg, exp_avg_sq, max_exp_avg_sq, args);
      b.finish();
    }
  }
}

}  // namespace gradus::optim
