// Dynamic loss scaling for float16 training, with PyTorch's GradScaler semantics.
//
//   amp::GradScaler scaler;                       // scale 2^16, x2 after 2000 clean steps, x0.5
//   scaler.scale(loss).backward();                // gradients of loss * scale
//   scaler.unscale_(optimizer);                   // optional: before clipping
//   optim::clip_grad_norm(params, 1.0);
//   scaler.step(optimizer);                       // skipped when a gradient is inf/NaN
//   scaler.update();                              // back off or grow the scale
//
// Small float16 gradients underflow to zero; multiplying the loss by a large scale keeps them
// representable, and unscaling divides it out again before the optimizer sees them. When the
// scale is too large, some gradient overflows: that step is skipped (parameters and optimizer
// state untouched) and the scale backs off; after growth_interval clean steps it grows.
//
// unscale_ multiplies every gradient by 1/scale and checks it for inf/NaN in one fused pass per
// device (the backends' unscale_and_check), accumulating a device-side flag; step() reads that
// flag once (the only host synchronisation) to decide the skip. Gradient accumulation: scale each
// micro-batch's loss, call step/update once. The scale is a float32 value updated exactly as
// PyTorch does (in double, rounded to float), so a recorded overflow pattern gives PyTorch's scales
// (tests/amp, golden file written by torch.amp.GradScaler).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gradus/core/tensor.h"
#include "gradus/optim/optimizer.h"

namespace gradus::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: every call is a pass-through (scale 1, step always taken)
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (differentiable). The loss must be floating.
  Tensor scale(const Tensor& loss) const;
  // Divides the optimizer's gradients by the scale in place and records whether any is inf/NaN.
  // At most once per optimizer between two update() calls (throws ValueError otherwise).
  void unscale_(const optim::Optimizer& optimizer);
  // Unscales (if not done yet) and steps the optimizer unless a gradient was inf/NaN. Returns
  // whether the step was taken.
  bool step(optim::Optimizer& optimizer);
  // Backs off (any overflow since the last update) or counts towards growth. Clears the
  // per-iteration state.
  void update();

  double get_scale() const { return enabled_ ? static_cast<double>(scale_) : 1.0; }
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return enabled_; }
  // Steps skipped since construction (for logs and tests).
  int64_t skipped_steps() const { return skipped_steps_; }

  // {"scale", "growth_tracker", "growth_factor", "backoff_factor", "growth_interval"}: goes into
  // io::TrainingState::scaler, so a resumed run continues with the same scale.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  struct PerOptimizer {
    const optim::Optimizer* optimizer;
    std::vector<Tensor> found_inf;  // one flag per device
    bool unscaled = false;
  };
  PerOptimizer& entry(const optim::Optimizer& optimizer);
  bool found_inf(PerOptimizer& e) const;

  bool enabled_;
  float scale_;
  double growth_factor_, backoff_factor_;
  int64_t growth_interval_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
  std::vector<PerOptimizer> iteration_;  // optimizers touched since the last update()
};

}  // namespace gradus::amp
