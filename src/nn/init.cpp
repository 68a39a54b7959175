// torch.nn.init equivalents on top of the RNG ops (gradus::uniform_ / normal_).
#include "gradus/nn/init.h"

#include <cmath>

#include "gradus/autograd.h"
#include "gradus/ops.h"

namespace gradus::nn::init {

Tensor& uniform_(Tensor& t, double a, double b, Generator* gen) {
  NoGradGuard no_grad;
  return gradus::uniform_(t, a, b, gen);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  NoGradGuard no_grad;
  return gradus::normal_(t, mean, std, gen);
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard no_grad;
  return t.fill_(value);
}

Tensor& zeros_(Tensor& t) {
  return constant_(t, 0.0);
}
Tensor& ones_(Tensor& t) {
  return constant_(t, 1.0);
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  GRADUS_CHECK(t.defined(), ValueError, "calculate_fan_in_and_fan_out: undefined tensor");
  GRADUS_CHECK(t.dim() >= 2, ValueError,
               "calculate_fan_in_and_fan_out: fan in and fan out can not be computed for a "
               "tensor with fewer than 2 dimensions (shape ",
               shape_str(t.sizes()), ")");
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "identity" || nl == "sigmoid" || nl.starts_with("conv")) return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  throw ValueError("calculate_gain: unsupported nonlinearity \"" + nl +
                   "\" (expected linear, conv1d/2d/3d, sigmoid, tanh, relu, leaky_relu or selu)");
}

namespace {
double kaiming_std(const Tensor& t, double a, FanMode mode, const std::string& nonlinearity) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const int64_t fan = mode == FanMode::fan_in ? fan_in : fan_out;
  GRADUS_CHECK(fan > 0, ValueError, "kaiming init: the fan of a tensor of shape ",
               shape_str(t.sizes()), " is 0");
  return calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
}

double xavier_std(const Tensor& t, double gain) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  GRADUS_CHECK(fan_in + fan_out > 0, ValueError, "xavier init: the fans of a tensor of shape ",
               shape_str(t.sizes()), " are 0");
  return gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out));
}
}  // namespace

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, const std::string& nonlinearity,
                         Generator* gen) {
  if (t.defined() && t.numel() == 0) return t;  // like PyTorch: nothing to initialise
  const double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nonlinearity);
  return init::uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, const std::string& nonlinearity,
                        Generator* gen) {
  if (t.defined() && t.numel() == 0) return t;
  return init::normal_(t, 0.0, kaiming_std(t, a, mode, nonlinearity), gen);
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  const double bound = std::sqrt(3.0) * xavier_std(t, gain);
  return init::uniform_(t, -bound, bound, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  return init::normal_(t, 0.0, xavier_std(t, gain), gen);
}

}  // namespace gradus::nn::init
