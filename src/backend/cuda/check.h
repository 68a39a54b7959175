// Error checking for every CUDA runtime, cuBLAS(Lt) and cuDNN call. A failure throws gradus::Error
// (OutOfMemoryError for allocation failures) naming the op, the call and file:line.
// Includable from host C++ and from .cu files.
#pragma once

#include <cuda_runtime.h>

#include "gradus/core/error.h"

namespace gradus::backend::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line,
                                   const char* op);
[[noreturn]] void throw_library_error(const char* library, int status, const char* status_name,
                                      const char* call, const char* file, int line, const char* op);

inline void check_cuda(cudaError_t err, const char* call, const char* file, int line,
                       const char* op) {
  if (err != cudaSuccess) throw_cuda_error(err, call, file, line, op);
}

}  // namespace gradus::backend::cuda

// GRADUS_CUDA_CHECK("conv2d", cudaMemcpyAsync(...));
#define GRADUS_CUDA_CHECK(op, call) \
  ::gradus::backend::cuda::check_cuda((call), #call, __FILE__, __LINE__, (op))

// After a kernel launch: reports launch configuration errors (and earlier asynchronous faults).
#define GRADUS_CUDA_CHECK_LAUNCH(op) \
  ::gradus::backend::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__, (op))
