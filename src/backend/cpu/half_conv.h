// bf16 convolutions on the CPU's bf16 instructions through oneDNN (the GEMM's counterpart,
// onednn_gemm.h): forward, backward-data and backward-weight, float32 accumulation, one rounding
// when storing. Each returns false, with nothing written, where the native path is off
// (native_bf16_gemm() is false) or oneDNN has no fast kernel for the case; CpuBackend then runs
// its float32 kernels on converted copies. Shapes and arguments as in backend.h's conv2d.
#pragma once

#include "backend/backend.h"

namespace gradus::backend::cpu {

bool native_bf16_conv2d(Backend& be, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Tensor& out, const Conv2dArgs& args);
bool native_bf16_conv2d_backward_data(Backend& be, const Tensor& grad_out, const Tensor& w,
                                      const Tensor& grad_x, const Conv2dArgs& args);
// grad_bias may be undefined.
bool native_bf16_conv2d_backward_weight(Backend& be, const Tensor& grad_out, const Tensor& x,
                                        const Tensor& grad_w, const Tensor& grad_bias,
                                        const Conv2dArgs& args);

}  // namespace gradus::backend::cpu
