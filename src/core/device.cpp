#include "gradus/core/device.h"

#include <charconv>

#include "gradus/core/cuda.h"
#include "gradus/core/error.h"

namespace gradus {

int cuda_device_count() {
  return cuda::device_count();
}

Device Device::best() {
  return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
}

Device Device::parse(std::string_view text) {
  if (text == "auto") return best();
  if (text == "cpu") return cpu();
  if (text == "cuda" || text == "gpu") return cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view num = text.substr(5);
    int index = -1;
    auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (ec == std::errc() && ptr == num.data() + num.size() && index >= 0) return cuda(index);
  }
  throw ValueError("invalid device '" + std::string(text) +
                   "' (expected auto, cpu, cuda or cuda:N)");
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index_);
}

}  // namespace gradus
