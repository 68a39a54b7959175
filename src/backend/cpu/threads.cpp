#include "gradus/core/threads.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "backend/cpu/blas_address_space.h"
#include "backend/cpu/cpu_backend.h"
#include "gradus/core/error.h"

extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
}

namespace gradus {
namespace {

using backend::cpu::kMiB;

// The most of `wanted` threads whose BLAS buffers fit under the address-space limit, counting
// only the buffers not mapped yet (OpenBLAS's per-thread ones, and the callers' that
// reserve_blas_buffers mapped).
int threads_within_address_space(int wanted) {
  if (backend::cpu::address_space_limit() == 0) return wanted;
  const int blas_threads = openblas_get_num_threads();
  const int callers = backend::cpu::reserved_blas_buffers();
  for (int threads = wanted; threads >= 1; --threads) {
    const auto new_threads = static_cast<std::size_t>(std::max(0, threads - blas_threads));
    const auto new_callers = static_cast<std::size_t>(std::max(0, threads - callers));
    const std::size_t bytes = (new_threads + new_callers) * backend::cpu::kBlasBufferBytes +
                              new_threads * backend::cpu::kThreadOverheadBytes;
    if (bytes == 0 ||
        backend::cpu::address_space_fits(bytes + backend::cpu::kProgramHeadroomBytes)) {
      return threads;
    }
  }
  return 0;
}

}  // namespace

void set_num_threads(int n) {
  GRADUS_CHECK(n >= 1, ValueError, "set_num_threads: expected a thread count >= 1, got ", n);
  // More threads map more BLAS buffers: under an address-space limit, as many as fit.
  const int fit = threads_within_address_space(n);
  GRADUS_CHECK(fit >= 1, OutOfMemoryError, "set_num_threads(", n,
               "): the address-space limit (ulimit -v) of ",
               backend::cpu::address_space_limit() / kMiB,
               " MiB leaves no room for the BLAS library's buffers (",
               backend::cpu::blas_address_space_bytes(1) / kMiB, " MiB for one thread)");
  if (fit < n) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      std::fprintf(stderr,
                   "gradus: the address-space limit (ulimit -v) of %zu MiB leaves room for %d of "
                   "the %d threads asked for; using %d\n",
                   backend::cpu::address_space_limit() / kMiB, fit, n, fit);
    }
  }
  omp_set_num_threads(fit);
  openblas_set_num_threads(fit);
  backend::cpu::reserve_blas_buffers(fit);
}

int get_num_threads() {
  return omp_get_max_threads();
}

}  // namespace gradus
