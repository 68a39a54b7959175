#include "backend/cpu/cpu_backend.h"

#include <omp.h>

namespace gradus::backend {

Backend* cpu_backend() {
  static cpu::CpuBackend backend;
  static const bool blas_ready = (cpu::configure_blas(), true);
  // (Under an address-space limit: the buffers of a parallel GEMM's callers, mapped now.)
  static const bool buffers_ready = (cpu::reserve_blas_buffers(omp_get_max_threads()), true);
  (void)buffers_ready;
  (void)blas_ready;
  return &backend;
}

}  // namespace gradus::backend
