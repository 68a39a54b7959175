// What cpu_kernels_info() reports: the instruction set this copy of the CPU backend was compiled
// for (the compiler's ISA macros) and the file it was loaded from.
#include <dlfcn.h>

#include <cstdlib>

#include "gradus/core/cpu_kernels.h"

namespace gradus {

namespace {

const char kInThisLibrary = 0;  // an address inside this library, for dladdr

const char* compiled_isa() {
#if defined(GRADUS_CPU_NATIVE)
#if defined(__AVX512F__)
  return "native (AVX-512)";
#elif defined(__AVX2__)
  return "native (AVX2)";
#else
  return "native";
#endif
#elif defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
  return "x86-64-v3 (AVX2, FMA)";
#elif defined(__x86_64__)
  return "x86-64 (SSE2)";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "generic";
#endif
}

}  // namespace

CpuKernelsInfo cpu_kernels_info() {
  CpuKernelsInfo info;
  info.isa = compiled_isa();
  Dl_info where{};
  if (dladdr(&kInThisLibrary, &where) != 0 && where.dli_fname != nullptr) {
    // The loader's name can be ".../bin/../lib/..." (from $ORIGIN): report the resolved file.
    char* resolved = realpath(where.dli_fname, nullptr);
    info.path = resolved != nullptr ? resolved : where.dli_fname;
    std::free(resolved);
  }
  return info;
}

}  // namespace gradus
