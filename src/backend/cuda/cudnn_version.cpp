// The cuDNN version the module runs with (cuda::cudnn_version() in gradus/core/cuda_libraries.h).
#include <string>

#if GRADUS_HAS_CUDNN
#include <cudnn.h>
#endif

namespace gradus::backend {

std::string cudnn_version() {
#if GRADUS_HAS_CUDNN
  // cudnnGetVersion(): major * 1000 + minor * 100 + patch before cuDNN 9, major * 10000 +
  // minor * 100 + patch since.
  const size_t v = cudnnGetVersion();
  const size_t major = v >= 90000 ? v / 10000 : v / 1000;
  const size_t minor = v >= 90000 ? v / 100 % 100 : v / 100 % 10;
  return "cuDNN " + std::to_string(major) + "." + std::to_string(minor) + "." +
         std::to_string(v % 100);
#else
  return "not built (cuDNN was not found at configure time)";
#endif
}

}  // namespace gradus::backend
