// What cpu_kernels_info() reports: the instruction set this copy of the CPU backend was compiled
// for (the compiler's ISA macros) and the file it was loaded from.
#include "backend/cpu/onednn_gemm.h"
#include "core/shared_library.h"
#include "gradus/core/cpu_kernels.h"

namespace gradus {

namespace {

const char kInThisLibrary = 0;  // an address inside this library

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
  info.path = detail::library_path(&kInThisLibrary);
  info.half_gemm = backend::cpu::half_gemm_description();
  info.native_bf16_gemm = backend::cpu::native_bf16_gemm();
  info.f32_gemm = backend::cpu::f32_gemm_description();
  info.onednn_f32_gemm = backend::cpu::onednn_f32_gemm();
  return info;
}

}  // namespace gradus
