// gradus info: what this binary is and what it can use.
#include <cblas.h>
#include <omp.h>

#include <cstdio>
#include <string>

#include "commands.h"
#include "gradus/core/device.h"
#include "gradus/core/error.h"
#include "gradus/core/threads.h"

namespace gradus::cli {

void apply_threads(int threads) {
  if (threads > 0) set_num_threads(threads);
}

Device resolve_device(const std::string& name) {
  const Device d = Device::parse(name);
  if (d.is_cuda()) {
    const int count = cuda_device_count();
    GRADUS_CHECK(d.index() < count, DeviceError, "device '", name, "' was requested but ",
                 count == 0
                     ? std::string(GRADUS_BUILD_CUDA ? "no CUDA device is visible"
                                                     : "this build has no CUDA backend "
                                                       "(configure with -DGRADUS_USE_CUDA=ON)")
                     : std::to_string(count) + " CUDA device(s) are visible",
                 "; use --device cpu or --device auto");
  }
  return d;
}

int run_info() {
  std::printf("gradus %s\n", GRADUS_VERSION);
  std::printf("build: %s, %s, CUDA backend %s\n", GRADUS_BUILD_TYPE, GRADUS_CXX_COMPILER,
              GRADUS_BUILD_CUDA ? "on" : "off");
  std::printf("threads: %d (OpenMP, %d processors)\n", get_num_threads(), omp_get_num_procs());
  const char* config = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  const char* core = openblas_get_corename();  // the kernel set chosen at run time
  std::printf("BLAS: %s, core %s, %d threads\n", config ? config : "OpenBLAS (unknown)",
              core ? core : "unknown", openblas_get_num_threads());
  const int cuda = cuda_device_count();
  std::printf("devices: cpu");
  for (int i = 0; i < cuda; ++i) std::printf(", cuda:%d", i);
  std::printf(" (%d CUDA device%s)\n", cuda, cuda == 1 ? "" : "s");
  std::printf("default device: %s\n", Device::best().str().c_str());
  return 0;
}

}  // namespace gradus::cli
