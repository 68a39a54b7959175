// Versions of the NVIDIA libraries the CUDA backend was linked with, for `gradus info`. (NCCL's
// is dist::nccl_version(), beside the engine that uses it.)
#pragma once

#include <string>

namespace gradus::cuda {

#if GRADUS_HAS_CUDA
// "cuDNN 9.1.0" from cudnnGetVersion() (the library loaded, not the header built against);
// "not built (cuDNN was not found at configure time)" when the backend has no cuDNN.
std::string cudnn_version();
#else
inline std::string cudnn_version() {
  return "not built (no CUDA backend)";
}
#endif

}  // namespace gradus::cuda
