// Versions of the NVIDIA libraries the CUDA backend module was linked with, for `gradus info`.
// (NCCL's is dist::nccl_version(), beside the engine that uses it.)
#pragma once

#include <string>

namespace gradus::cuda {

// "cuDNN 9.1.0" from cudnnGetVersion() (the library loaded, not the header built against);
// "not built (...)" when the module has no cuDNN, or why there is no CUDA backend module.
std::string cudnn_version();

}  // namespace gradus::cuda
