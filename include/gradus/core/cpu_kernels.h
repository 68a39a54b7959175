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
  // How 16-bit GEMMs run: "bf16 on AVX512-BF16 (oneDNN 2.6.3)", or converted to float32 where
  // the CPU (or ONEDNN_MAX_CPU_ISA) rules the native path out.
  std::string half_gemm;
  bool native_bf16_gemm = false;
  // How float32 GEMMs run: on oneDNN's AVX-512 kernels ("AVX-512 (oneDNN 2.6.3); OpenBLAS below
  // N multiply-adds") or on OpenBLAS.
  std::string f32_gemm;
  bool onednn_f32_gemm = false;
};

CpuKernelsInfo cpu_kernels_info();

}  // namespace gradus
