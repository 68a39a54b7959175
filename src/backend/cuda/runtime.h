// Internal CUDA runtime state of the backend: per-device streams, the stream-ordered pool
// allocator, library handles and workspaces. Host C++ only (not included by .cu files).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#if GRADUS_HAS_CUDNN
#include <cudnn.h>
#endif

#include <atomic>
#include <cstddef>
#include <mutex>

#include "backend/cuda/check.h"
#include "gradus/core/storage.h"
#include "gradus/core/tensor.h"

#define GRADUS_CUBLAS_CHECK(op, call)                                                          \
  do {                                                                                         \
    const cublasStatus_t gradus_status_ = (call);                                              \
    if (gradus_status_ != CUBLAS_STATUS_SUCCESS) {                                             \
      ::gradus::backend::cuda::throw_library_error("cuBLAS", static_cast<int>(gradus_status_), \
                                                   cublasGetStatusName(gradus_status_), #call, \
                                                   __FILE__, __LINE__, (op));                  \
    }                                                                                          \
  } while (0)

#if GRADUS_HAS_CUDNN
#define GRADUS_CUDNN_CHECK(op, call)                                                           \
  do {                                                                                         \
    const cudnnStatus_t gradus_status_ = (call);                                               \
    if (gradus_status_ != CUDNN_STATUS_SUCCESS) {                                              \
      ::gradus::backend::cuda::throw_library_error("cuDNN", static_cast<int>(gradus_status_),  \
                                                   cudnnGetErrorString(gradus_status_), #call, \
                                                   __FILE__, __LINE__, (op));                  \
    }                                                                                          \
  } while (0)
#endif

namespace gradus::backend::cuda {

inline constexpr int kMaxDevices = 16;
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

// Everything the backend keeps per device. Created on the first use of the device.
struct DeviceState {
  int index = 0;
  std::atomic<bool> ready{false};  // initialised (has a context, streams, pool)
  cudaDeviceProp props{};
  cudaStream_t default_stream = nullptr;
  cudaStream_t copy_stream = nullptr;
  std::atomic<cudaStream_t> current{nullptr};
  cudaMemPool_t pool = nullptr;
  std::atomic<size_t> allocated{0};
  std::atomic<size_t> peak_allocated{0};
  std::atomic<uint64_t> num_allocs{0};
  std::atomic<uint64_t> num_ooms{0};

  // Library handles, created lazily (cuDNN's creation costs a few hundred milliseconds).
  std::mutex handle_mu;
  cublasLtHandle_t lt = nullptr;
  cublasHandle_t blas = nullptr;
  void* gemm_workspace = nullptr;  // kGemmWorkspaceBytes, from the pool
#if GRADUS_HAS_CUDNN
  cudnnHandle_t cudnn = nullptr;
#endif
};

// Number of visible devices; 0 (never an error) without a driver or GPU.
int device_count();
// The state of device `index`, initialising it on first use. Throws DeviceError for a device that
// does not exist.
DeviceState& device_state(int index);
inline cudaStream_t stream_of(int index) {
  return device_state(index).current.load();
}

// Makes `index` the calling thread's current device for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  explicit DeviceGuard(const Tensor& t) : DeviceGuard(t.device().index()) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Stream-ordered scratch memory from the device's pool, freed (in stream order) on destruction.
class Workspace {
 public:
  Workspace(size_t nbytes, int device, const char* op);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* data() const { return data_; }
  size_t size() const { return nbytes_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  int device_ = 0;
};

// Raw pool allocation used by the allocator and workspaces (throws OutOfMemoryError).
void* pool_allocate(size_t nbytes, int device, const char* op);
void pool_free(void* ptr, size_t nbytes, int device) noexcept;

// Handles bound to the device's current stream.
cublasLtHandle_t lt_handle(int device);
cublasHandle_t blas_handle(int device);
void* gemm_workspace(int device);
#if GRADUS_HAS_CUDNN
cudnnHandle_t cudnn_handle(int device);
#endif

bool tf32_allowed();
void set_tf32_allowed(bool allow);

}  // namespace gradus::backend::cuda
