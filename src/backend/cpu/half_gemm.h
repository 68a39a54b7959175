// The native 16-bit GEMM of the CPU backend: bf16 operands multiplied on the CPU's bf16 dot-product
// instructions (AVX512-BF16, AMX) through oneDNN, float32 accumulation, the bias and activation
// fused, one rounding when storing. Where the CPU lacks them (or oneDNN is limited below them
// with ONEDNN_MAX_CPU_ISA, or gradus was built without oneDNN) CpuBackend::gemm converts to
// float32 and multiplies with OpenBLAS instead.
#pragma once

#include <string>

#include "backend/backend.h"

namespace gradus::backend::cpu {

// True when bf16 GEMMs run natively in this process (decided once, from oneDNN's view of the CPU).
bool native_bf16_gemm();

// One line for `gradus info` and the roofline: which path bf16 GEMMs take and why.
std::string half_gemm_description();

// out = act(alpha * op(a) @ op(b) + beta * out + bias) for bf16 tensors, on oneDNN. Operands of
// any layout are accepted (those oneDNN cannot read fast are copied first). False, with nothing
// written, when the native path is off or oneDNN has no fast kernel for the case: the caller
// takes the float32 path.
bool native_bf16_gemm(Backend& be, const Tensor& a, const Tensor& b, const Tensor& out,
                      const GemmArgs& args);

}  // namespace gradus::backend::cpu
