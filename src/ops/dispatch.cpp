// The backend registry. The CPU backend is linked in and registered before the first op runs (a
// static initialiser here, plus a lazy check in backend_for); the CUDA backend is the run-time
// module of src/core/cuda_module.h, loaded when CUDA is first asked for.
#include "backend/backend.h"
#include "core/cuda_module.h"

namespace gradus::backend {
namespace {

Backend* g_cpu = nullptr;

bool register_cpu() {
  g_cpu = cpu_backend();
  return true;
}

const bool g_registered = register_cpu();

}  // namespace

Backend& backend_for(DeviceType type) {
  static const bool once = g_registered || register_cpu();
  (void)once;
  if (type == DeviceType::CPU) return *g_cpu;
  cuda::detail::Module* m = cuda::detail::module();
  GRADUS_CHECK(m != nullptr, DeviceError,
               "no backend for device type 'cuda': ", cuda::backend_status());
  return *m->backend();
}

}  // namespace gradus::backend
