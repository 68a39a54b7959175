// Gradient clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_).
#pragma once

#include <limits>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::optim {

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Scales every defined gradient in place by min(1, max_norm / (total_norm + 1e-6)), where
// total_norm is the norm_type-norm of all gradients together (kInfNorm for the max-abs norm).
// Returns total_norm as a scalar tensor on the first gradient's device (f32, or f64 when any
// gradient is f64); nothing is read back to the host unless error_if_nonfinite is set, in which
// case a NaN/inf total throws ValueError. Parameters without gradients are skipped; with none
// at all the result is 0.
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

// Clamps every defined gradient in place to [-clip_value, clip_value].
void clip_grad_value(const std::vector<Tensor>& params, double clip_value);

}  // namespace gradus::optim
