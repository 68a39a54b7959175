#include "backend/cpu/cpu_backend.h"

namespace gradus::backend {

Backend* cpu_backend() {
  static cpu::CpuBackend backend;
  static const bool blas_ready = (cpu::configure_blas(), true);
  (void)blas_ready;
  return &backend;
}

}  // namespace gradus::backend
