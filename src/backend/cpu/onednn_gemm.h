// The CPU backend's GEMMs on oneDNN's matmul (brgemm kernels), where they beat OpenBLAS:
// - bf16 on the CPU's bf16 dot-product instructions (AVX512-BF16, AMX), float32 accumulation,
//   one rounding when storing;
// - float32 on AVX-512, where OpenBLAS is held to its AVX2 kernels (OPENBLAS_CORETYPE=Haswell,
//   which these machines need) and oneDNN's are about twice as fast.
// The bias, activation, beta and alpha are fused. Where the CPU lacks the instructions (or oneDNN
// is limited below them with ONEDNN_MAX_CPU_ISA, or gradus was built without oneDNN)
// CpuBackend::gemm uses OpenBLAS (bf16 converted to float32).
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace gradus::backend::cpu {

// True when bf16 GEMMs run natively in this process (decided once, from oneDNN's view of the CPU).
bool native_bf16_gemm();

// True when float32 GEMMs of at least onednn_f32_min_work() multiply-adds per matrix run on
// oneDNN's AVX-512 kernels in this process (decided once, like native_bf16_gemm()).
bool onednn_f32_gemm();

// Below this many multiply-adds per matrix OpenBLAS is faster: oneDNN's call costs ~2 us.
constexpr int64_t onednn_f32_min_work() {
  return int64_t{32} * 64 * 64;
}

// One line each for `gradus info` and the roofline: which path the GEMMs take and why.
std::string half_gemm_description();
std::string f32_gemm_description();

// out = act(alpha * op(a) @ op(b) + beta * out + bias) on oneDNN, for bf16 tensors where
// native_bf16_gemm() and float32 ones where onednn_f32_gemm() (any size: the caller decides what
// is worth it). Operands of any layout are accepted (those oneDNN cannot read fast are copied
// first). False, with nothing written, for other dtypes, when the path is off, or when oneDNN
// has no fast kernel for the case: the caller then takes the OpenBLAS path.
bool onednn_gemm(Backend& be, const Tensor& a, const Tensor& b, const Tensor& out,
                 const GemmArgs& args);

}  // namespace gradus::backend::cpu
