// Parameter initialisers with torch.nn.init's semantics (fan computation, gains, bounds). Each
// fills the tensor in place without recording history and returns it.
#pragma once

#include <string>
#include <utility>

#include "gradus/core/random.h"
#include "gradus/core/tensor.h"

namespace gradus::nn::init {

enum class FanMode { fan_in, fan_out };

// U(a, b) / N(mean, std) / constants.
Tensor& uniform_(Tensor& t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);

// (fan_in, fan_out) like torch.nn.init._calculate_fan_in_and_fan_out: for a weight of shape
// [out, in, k...], fan_in = in * prod(k), fan_out = out * prod(k). Needs dim() >= 2 (ValueError).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

// The recommended gain for a nonlinearity: "linear"/"conv*"/"sigmoid" 1, "tanh" 5/3, "relu"
// sqrt(2), "leaky_relu" sqrt(2 / (1 + param^2)) (param = negative slope, default 0.01),
// "selu" 3/4. Unknown names throw ValueError.
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

// std = gain / sqrt(fan); uniform bound = sqrt(3) * std. `a` is the leaky_relu slope.
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                         const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
// std = gain * sqrt(2 / (fan_in + fan_out)); uniform bound = sqrt(3) * std.
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace gradus::nn::init
