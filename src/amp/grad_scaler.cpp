#include "gradus/amp/grad_scaler.h"

#include <cmath>

#include "backend/backend.h"
#include "gradus/autograd.h"
#include "gradus/core/error.h"
#include "gradus/ops.h"

namespace gradus::amp {

namespace {

void check_options(const GradScalerOptions& o) {
  GRADUS_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, ValueError,
               "GradScaler: init_scale must be a finite number > 0, got ", o.init_scale);
  GRADUS_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1, ValueError,
               "GradScaler: growth_factor must be > 1, got ", o.growth_factor);
  GRADUS_CHECK(std::isfinite(o.backoff_factor) && o.backoff_factor > 0 && o.backoff_factor < 1,
               ValueError, "GradScaler: backoff_factor must be in (0, 1), got ", o.backoff_factor);
  GRADUS_CHECK(o.growth_interval >= 1, ValueError, "GradScaler: growth_interval must be >= 1, got ",
               o.growth_interval);
}

double required(const std::map<std::string, double>& s, const char* key) {
  auto it = s.find(key);
  GRADUS_CHECK(it != s.end(), ValueError, "GradScaler::load_state_dict: no '", key, "' entry");
  return it->second;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : enabled_(options.enabled),
      scale_(static_cast<float>(options.init_scale)),
      growth_factor_(options.growth_factor),
      backoff_factor_(options.backoff_factor),
      growth_interval_(options.growth_interval) {
  check_options(options);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  GRADUS_CHECK(loss.defined() && is_floating(loss.dtype()), ValueError,
               "GradScaler::scale: expected a floating loss tensor");
  if (!enabled_) return loss;
  return mul(loss, static_cast<double>(scale_));
}

GradScaler::PerOptimizer& GradScaler::entry(const optim::Optimizer& optimizer) {
  for (PerOptimizer& e : iteration_) {
    if (e.optimizer == &optimizer) return e;
  }
  iteration_.push_back({&optimizer, {}, false});
  return iteration_.back();
}

void GradScaler::unscale_(const optim::Optimizer& optimizer) {
  if (!enabled_) return;
  PerOptimizer& e = entry(optimizer);
  GRADUS_CHECK(!e.unscaled, ValueError,
               "GradScaler::unscale_: already called on this optimizer since the last update()");
  e.unscaled = true;
  // PyTorch: inv_scale = float(1 / double(scale)).
  const double inv_scale =
      static_cast<double>(static_cast<float>(1.0 / static_cast<double>(scale_)));
  // The gradients, per device (a backend call and a flag each).
  std::vector<std::pair<Device, std::vector<Tensor>>> by_device;
  for (const Tensor& p : optimizer.all_params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    GRADUS_CHECK(g.is_contiguous(), ValueError,
                 "GradScaler::unscale_: gradients must be contiguous (got one of shape ",
                 shape_str(g.sizes()), ")");
    auto it = by_device.begin();
    while (it != by_device.end() && it->first != g.device()) ++it;
    if (it == by_device.end()) {
      by_device.emplace_back(g.device(), std::vector<Tensor>{});
      it = by_device.end() - 1;
    }
    it->second.push_back(g);
  }
  NoGradGuard no_grad;
  for (auto& [device, grads] : by_device) {
    Tensor flag = zeros({1}, {DType::f32, device});
    backend::backend_for(device.type()).unscale_and_check(grads, inv_scale, flag);
    for (const Tensor& g : grads) g.bump_version();
    e.found_inf.push_back(flag);
  }
}

bool GradScaler::found_inf(PerOptimizer& e) const {
  double any = 0;
  for (const Tensor& f : e.found_inf) any += f.item();  // the one host read per device
  return any != 0;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  PerOptimizer& e = entry(optimizer);
  if (!e.unscaled) unscale_(optimizer);
  if (found_inf(e)) {
    ++skipped_steps_;
    return false;
  }
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  bool overflow = false;
  for (PerOptimizer& e : iteration_) overflow |= e.unscaled && found_inf(e);
  // As torch's _amp_update_scale_: computed in double, stored as float32.
  if (overflow) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * backoff_factor_);
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == growth_interval_) {
    scale_ = static_cast<float>(static_cast<double>(scale_) * growth_factor_);
    growth_tracker_ = 0;
  }
  iteration_.clear();
}

std::map<std::string, double> GradScaler::state_dict() const {
  return {{"scale", static_cast<double>(scale_)},
          {"growth_tracker", static_cast<double>(growth_tracker_)},
          {"growth_factor", growth_factor_},
          {"backoff_factor", backoff_factor_},
          {"growth_interval", static_cast<double>(growth_interval_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  GradScalerOptions o;
  o.init_scale = required(state, "scale");
  o.growth_factor = required(state, "growth_factor");
  o.backoff_factor = required(state, "backoff_factor");
  o.growth_interval = static_cast<int64_t>(required(state, "growth_interval"));
  check_options(o);
  const double tracker = required(state, "growth_tracker");
  GRADUS_CHECK(tracker >= 0 && tracker < static_cast<double>(o.growth_interval) &&
                   tracker == std::floor(tracker),
               ValueError, "GradScaler::load_state_dict: growth_tracker ", tracker,
               " is not an integer in [0, growth_interval)");
  scale_ = static_cast<float>(o.init_scale);
  growth_factor_ = o.growth_factor;
  backoff_factor_ = o.backoff_factor;
  growth_interval_ = o.growth_interval;
  growth_tracker_ = static_cast<int64_t>(tracker);
  iteration_.clear();
}

}  // namespace gradus::amp
