// SGD: validation, option (de)serialisation and the fused step.
#include "gradus/optim/sgd.h"

#include "gradus/autograd.h"
#include "gradus/core/profiling.h"
#include "optim/common.h"

namespace gradus::optim {

namespace {
void validate(const SGDOptions& o) {
  GRADUS_CHECK(o.lr >= 0, ValueError, "SGD: invalid learning rate ", o.lr, " (must be >= 0)");
  GRADUS_CHECK(o.momentum >= 0, ValueError, "SGD: invalid momentum ", o.momentum,
               " (must be >= 0)");
  GRADUS_CHECK(o.weight_decay >= 0, ValueError, "SGD: invalid weight_decay ", o.weight_decay,
               " (must be >= 0)");
  GRADUS_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), ValueError,
               "SGD: Nesterov momentum requires a momentum > 0 and zero dampening (momentum ",
               o.momentum, ", dampening ", o.dampening, ")");
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup<SGDOptions>>{{std::move(params), options}}) {}

SGD::SGD(std::vector<ParamGroup<SGDOptions>> groups) {
  GRADUS_CHECK(!groups.empty(), ValueError, "SGD: got no parameter groups");
  for (auto& g : groups) {
    validate(g.options);
    add_group(std::move(g.params));
    options_.push_back(g.options);
  }
}

double SGD::group_lr(size_t group) const {
  return options(group).lr;
}

void SGD::set_group_lr(size_t group, double lr) {
  SGDOptions o = options(group);
  o.lr = lr;
  set_options(group, o);
}

const SGDOptions& SGD::options(size_t group) const {
  GRADUS_CHECK(group < options_.size(), IndexError, "SGD: param group ", group, " does not exist (",
               options_.size(), " groups)");
  return options_[group];
}

void SGD::set_options(size_t group, const SGDOptions& o) {
  options(group);  // range check
  validate(o);
  options_[group] = o;
  write_device_lr(group, o.lr);  // capturable mode only
}

std::map<std::string, double> SGD::group_options(size_t group) const {
  const SGDOptions& o = options(group);
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

void SGD::set_group_options(size_t group, const std::map<std::string, double>& v) {
  SGDOptions o = options(group);
  for (const auto& [k, x] : v) {
    if (k == "lr")
      o.lr = x;
    else if (k == "momentum")
      o.momentum = x;
    else if (k == "dampening")
      o.dampening = x;
    else if (k == "weight_decay")
      o.weight_decay = x;
    else if (k == "nesterov")
      o.nesterov = x != 0;
    else if (k == "maximize")
      o.maximize = x != 0;
    else
      throw ValueError("SGD::load_state_dict: unknown option \"" + k + "\"");
  }
  set_options(group, o);
}

void SGD::step() {
  GRADUS_PROFILE_SCOPE(optimizer, "SGD.step");
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const SGDOptions& o = options_[g];
    const bool use_momentum = o.momentum != 0;
    // Parameters whose momentum buffer does not exist yet take the first-step path (the kernel
    // initialises the buffer with the gradient), so they form their own bucket.
    auto buckets = detail::make_buckets("SGD", groups_[g], [&](size_t i) -> int64_t {
      return use_momentum && state_[g][i].tensors.count("momentum_buffer") == 0 ? 1 : 0;
    });
    const double* device_scalars =
        capturable() && !buckets.empty() ? advance_device_step(g) : nullptr;
    for (auto& b : buckets) {
      backend::SgdArgs args;
      args.device_scalars = device_scalars;
      args.lr = o.lr;
      args.momentum = o.momentum;
      args.dampening = o.dampening;
      args.weight_decay = o.weight_decay;
      args.nesterov = o.nesterov;
      args.maximize = o.maximize;
      args.first_step = b.key == 1;
      std::vector<Tensor> buffers;  // empty without momentum
      if (use_momentum)
        for (size_t i : b.indices) buffers.push_back(state_tensor(g, i, "momentum_buffer"));
      for (size_t i : b.indices) ++state_[g][i].step;  // capturable: the device's count rules
      backend::backend_for(b.device.type()).sgd_step(b.params, b.grads, buffers, args);
      b.finish();
    }
  }
}

}  // namespace gradus::optim
