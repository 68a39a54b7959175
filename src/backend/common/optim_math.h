// The per-step coefficients of Adam / AdamW, computed by one formula for both backends: on the
// host from the optimizer's arguments, or inside the kernel from a learning rate and step count
// that live in device memory (a capturable step, replayed by a CUDA graph with the values of the
// moment rather than those at capture).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define GRADUS_OPTIM_HD __host__ __device__
#else
#define GRADUS_OPTIM_HD
#endif

namespace gradus::backend {

struct AdamCoefficients {
  double neg_step_size;    // -lr / (1 - beta1^step)
  double bias2_sqrt;       // sqrt(1 - beta2^step)
  double decoupled_scale;  // 1 - lr * weight_decay (AdamW)
};

GRADUS_OPTIM_HD inline AdamCoefficients adam_coefficients(double lr, double step, double beta1,
                                                          double beta2, double weight_decay) {
  const double bias1 = 1.0 - std::pow(beta1, step);
  return {-(lr / bias1), std::sqrt(1.0 - std::pow(beta2, step)), 1.0 - lr * weight_decay};
}

}  // namespace gradus::backend
