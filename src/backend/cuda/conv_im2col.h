// Convolution as im2col + batched GEMM (cuBLASLt): the path for builds without cuDNN, and for
// GRADUS_CONV_IM2COL=1. All tensors contiguous NCHW of one floating dtype; outputs overwritten.
#pragma once

#include "backend/cuda/cuda_backend.h"

namespace gradus::backend::cuda::im2col {

void forward(CudaBackend& be, const Tensor& x, const Tensor& w, const Tensor& out,
             const Conv2dArgs& args);
void backward_data(CudaBackend& be, const Tensor& grad_out, const Tensor& w, const Tensor& grad_x,
                   const Conv2dArgs& args);
void backward_weight(CudaBackend& be, const Tensor& grad_out, const Tensor& x, const Tensor& grad_w,
                     const Conv2dArgs& args);

}  // namespace gradus::backend::cuda::im2col
