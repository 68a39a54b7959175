#include "gradus/core/threads.h"

#include <omp.h>

#include "gradus/core/error.h"

extern "C" void openblas_set_num_threads(int);

namespace gradus {

void set_num_threads(int n) {
  GRADUS_CHECK(n >= 1, ValueError, "set_num_threads: expected a thread count >= 1, got ", n);
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace gradus
