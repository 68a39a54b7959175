// The backend registry. gradus::autograd links every backend built and registers them before the
// first op runs (a static initialiser here, plus a lazy check in backend_for).
#include "backend/backend.h"
#include "gradus/core/profiling.h"

namespace gradus::backend {
#if GRADUS_HAS_CUDA
profiling::DeviceTimer* cuda_device_timer();  // src/backend/cuda/profiler_timer.cpp
#endif
namespace {

Backend* g_backends[2] = {nullptr, nullptr};

bool register_all() {
  g_backends[static_cast<int>(DeviceType::CPU)] = cpu_backend();
#if GRADUS_HAS_CUDA
  g_backends[static_cast<int>(DeviceType::CUDA)] = cuda_backend();
  profiling::set_device_timer(cuda_device_timer());  // the profiler's GPU time
#endif
  return true;
}

const bool g_registered = register_all();

}  // namespace

Backend& backend_for(DeviceType type) {
  static const bool once = g_registered || register_all();
  (void)once;
  Backend* b = g_backends[static_cast<int>(type)];
  GRADUS_CHECK(b != nullptr, DeviceError, "no backend for device type '",
               type == DeviceType::CUDA ? "cuda" : "cpu",
               "': this build of gradus has no CUDA backend (rebuild with GRADUS_USE_CUDA=ON on a "
               "machine with the CUDA toolkit)");
  return *b;
}

}  // namespace gradus::backend
