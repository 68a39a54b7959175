// Gradient clipping built from ops, so it runs on the gradients' device without host syncs.
#include "gradus/optim/clip.h"

#include <cmath>

#include "gradus/autograd.h"
#include "gradus/ops.h"

namespace gradus::optim {

namespace {
// The norm_type-norm of one gradient, as a 0-d tensor of `dtype` on the gradient's device.
Tensor grad_norm(const Tensor& g, double norm_type, DType dtype) {
  const Tensor x = g.dtype() == dtype ? g : g.to(dtype);
  if (std::isinf(norm_type)) return max(abs(x));
  if (norm_type == 2.0) return norm(x);
  if (norm_type == 1.0) return sum(abs(x));
  return pow(sum(pow(abs(x), norm_type)), 1.0 / norm_type);
}
}  // namespace

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type,
                      bool error_if_nonfinite) {
  GRADUS_CHECK(norm_type > 0, ValueError, "clip_grad_norm: norm_type must be positive, got ",
               norm_type);
  GRADUS_CHECK(max_norm >= 0, ValueError, "clip_grad_norm: max_norm must be >= 0, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  bool any_f64 = false;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    any_f64 = any_f64 || g.dtype() == DType::f64;
    grads.push_back(g);
  }
  // Half-precision gradients are accumulated in f32 so the squares do not overflow.
  const DType acc = any_f64 ? DType::f64 : DType::f32;
  if (grads.empty()) return zeros({}, {.dtype = acc});
  const Device device = grads.front().device();

  std::vector<Tensor> norms;
  for (const Tensor& g : grads) {
    Tensor n = grad_norm(g, norm_type, acc);
    norms.push_back(n.device() == device ? n : n.to(device));
  }
  const Tensor all = stack(norms);
  Tensor total = std::isinf(norm_type) ? max(all)
                 : norm_type == 2.0    ? norm(all)
                 : norm_type == 1.0    ? sum(all)
                                       : pow(sum(pow(all, norm_type)), 1.0 / norm_type);

  if (error_if_nonfinite) {
    const double v = total.item();
    GRADUS_CHECK(std::isfinite(v), ValueError, "clip_grad_norm: the total norm of order ",
                 norm_type, " for the gradients of ", grads.size(), " parameters is non-finite (",
                 v, "), so it cannot be clipped");
  }
  // coef = min(max_norm / (total + 1e-6), 1), applied without reading total on the host.
  const Tensor coef =
      clamp(div(scalar_tensor(max_norm, {acc, device}), add(total, 1e-6)), std::nullopt, 1.0);
  for (Tensor& g : grads) g.mul_(coef.device() == g.device() ? coef : coef.to(g.device()));
  return total;
}

void clip_grad_value(const std::vector<Tensor>& params, double clip_value) {
  GRADUS_CHECK(clip_value >= 0, ValueError, "clip_grad_value: clip_value must be >= 0, got ",
               clip_value);
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    g.copy_(clamp(g, -clip_value, clip_value));
  }
}

}  // namespace gradus::optim
