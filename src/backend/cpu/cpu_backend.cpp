#include "backend/cpu/cpu_backend.h"

namespace gradus::backend {

Backend* cpu_backend() {
  static cpu::CpuBackend backend;
  return &backend;
}

}  // namespace gradus::backend
