// Which build of the CPU backend's kernels this process runs. A portable gradus installs two
// copies of libgradus_backend_cpu.so, one for any x86-64 CPU and one for x86-64-v3 (AVX2, FMA)
// in lib/glibc-hwcaps/x86-64-v3/, and the dynamic loader picks the best the CPU runs
// (docs/design.md, "Portable CPU kernels").
#pragma once

#include <string>

namespace gradus {

struct CpuKernelsInfo {
  std::string isa;   // "x86-64-v3 (AVX2, FMA)", "x86-64 (SSE2)", "native (AVX-512)", ...
  std::string path;  // the loaded libgradus_backend_cpu (empty when linked statically)
};

CpuKernelsInfo cpu_kernels_info();

}  // namespace gradus
