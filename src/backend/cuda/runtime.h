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
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
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
  cudaStream_t default_stream = nullptr;  // every thread's compute stream unless it picks another
  cudaStream_t copy_stream = nullptr;
  cudaMemPool_t pool = nullptr;
  std::atomic<size_t> allocated{0};
  std::atomic<size_t> peak_allocated{0};
  std::atomic<uint64_t> num_allocs{0};
  std::atomic<uint64_t> num_ooms{0};

  // Library handles, created lazily (cuDNN's creation costs a few hundred milliseconds). A
  // cuBLAS or cuDNN handle carries a stream and scratch state, so two threads must not use one at
  // once: handles are leased (BlasLease, CudnnLease) from these free lists and returned after the
  // call; a thread that finds none free creates one. cuBLASLt's handle is stateless (the stream
  // is an argument) and shared.
  std::mutex handle_mu;
  cublasLtHandle_t lt = nullptr;
  std::vector<cublasHandle_t> free_blas;
  // One GEMM workspace per stream: kernels on two streams may run at once and must not share
  // scratch memory. Allocated in its stream's order and kept for the process.
  std::map<cudaStream_t, void*> gemm_workspaces;
#if GRADUS_HAS_CUDNN
  std::vector<cudnnHandle_t> free_cudnn;
#endif
  // Where this device's index checks record the first out-of-range value (page-locked, mapped:
  // `index_error` for the host, `index_error_on_device` for kernels).
  DeviceIndexError* index_error = nullptr;
  DeviceIndexError* index_error_on_device = nullptr;
  int* index_error_claim = nullptr;  // device memory: set by the reporting thread

  // Graph captures (graph.cpp) record on a stream of their own, one capture at a time.
  std::mutex capture_mu;
  cudaStream_t capture_stream = nullptr;
};

// Number of visible devices; 0 (never an error) without a driver or GPU.
int device_count();
// The state of device `index`, initialising it on first use. Throws DeviceError for a device that
// does not exist.
DeviceState& device_state(int index);
// The state of device `index` if it has been initialised, else nullptr (never initialises).
DeviceState* ready_state(int index);
// The calling thread's current stream on device `index`: the device's compute stream unless this
// thread chose another (set_thread_stream, cuda::StreamGuard). Per thread, as in PyTorch: a
// loader thread's StreamGuard never redirects the training thread's kernels.
cudaStream_t stream_of(int index);
// nullptr restores the device's compute stream for this thread.
void set_thread_stream(int index, cudaStream_t stream);

// ---- the host's waits on the device (device_checks.cpp) ----
// Every wait is counted (gradus::cuda::host_syncs(): a training step after warm-up should make
// none). Waits on a stream or a device then raise the IndexError of an index a device check
// found out of range since the last such wait, if any (an event wait does not: events also order
// internal work). `op` names the caller in a CUDA error.
void wait_stream(cudaStream_t stream, int device, const char* op);
// Throws GraphCaptureError when the calling thread is capturing: `op` would wait for the GPU.
void refuse_host_wait(const char* op);
void wait_device(int device, const char* op);
void wait_event(cudaEvent_t event, const char* op);
// Counts a wait made elsewhere (the allocator's out-of-memory retry, the profiler's clock).
void count_host_sync() noexcept;
uint64_t host_syncs() noexcept;
// Raises (and clears) the index error a device check recorded on `device`; on every device
// initialised so far when device is -1.
void raise_device_errors(int device);

// ---- CUDA graphs (graph.cpp) ----
// Records fn's work on `device` into an instantiated graph (cudaGraphExec_t); see cuda::Graph.
void* capture_graph(int device, const std::function<void()>& fn);
void replay_graph(int device, void* exec);
void destroy_graph(int device, void* exec) noexcept;
// The device the calling thread is capturing on, or -1.
int capturing_device() noexcept;
// Throws GraphCaptureError when the calling thread is capturing: `what` (its pieces, joined only
// then, so that the check costs one thread-local read outside a capture) cannot be replayed.
[[noreturn]] void throw_capture_refusal(const std::string& what);
template <typename... Pieces>
void refuse_in_capture(const Pieces&... what) {
  if (capturing_device() >= 0) throw_capture_refusal(detail::str_cat(what...));
}
// The allocator's part in a capture (pool_allocate / pool_free on the capturing thread): blocks
// allocated during it are the graph's, to be freed inside it; a block from before it that is freed
// during it is handed to `defer` (freed after the capture, since a graph cannot free memory it
// did not allocate). Blocks of a failed capture's graph are never freed (graph_memory_orphaned).
void capture_note_allocation(void* ptr, size_t nbytes, int device) noexcept;
bool capture_defers_free(void* ptr, size_t nbytes, int device) noexcept;
bool graph_memory_orphaned(void* ptr) noexcept;

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
  cudaStream_t stream_ = nullptr;
};

// Raw pool allocation used by the allocator and workspaces, ordered on `stream` (throws
// OutOfMemoryError); the free is ordered on the stream given (the one it was allocated on).
void* pool_allocate(size_t nbytes, int device, cudaStream_t stream, const char* op);
void pool_free(void* ptr, size_t nbytes, int device, cudaStream_t stream) noexcept;
// The same for a block also used on other streams: freed after each of them (stream_order.h).
void pool_free(void* ptr, size_t nbytes, int device, const StreamUses& uses) noexcept;

cublasLtHandle_t lt_handle(int device);
// The calling thread's current stream's GEMM workspace (kGemmWorkspaceBytes).
void* gemm_workspace(int device);

// A library handle for this thread's call, bound to its current stream: taken from the device's
// free list (created when none is free) and returned on destruction.
template <typename Traits>
class HandleLease {
 public:
  using Handle = typename Traits::Handle;
  explicit HandleLease(int device) : device_(device) {
    DeviceState& s = device_state(device);
    {
      std::lock_guard<std::mutex> lock(s.handle_mu);
      std::vector<Handle>& free = Traits::free_list(s);
      if (!free.empty()) {
        handle_ = free.back();
        free.pop_back();
      }
    }
    if (handle_ == nullptr) {
      DeviceGuard guard(device);
      handle_ = Traits::create();
    }
    Traits::bind(handle_, stream_of(device));
  }
  ~HandleLease() {
    DeviceState& s = device_state(device_);
    std::lock_guard<std::mutex> lock(s.handle_mu);
    Traits::free_list(s).push_back(handle_);
  }
  HandleLease(const HandleLease&) = delete;
  HandleLease& operator=(const HandleLease&) = delete;
  Handle get() const { return handle_; }

 private:
  int device_;
  Handle handle_ = nullptr;
};

struct BlasHandles {
  using Handle = cublasHandle_t;
  static std::vector<Handle>& free_list(DeviceState& s) { return s.free_blas; }
  static Handle create();
  static void bind(Handle h, cudaStream_t stream);
};
using BlasLease = HandleLease<BlasHandles>;

#if GRADUS_HAS_CUDNN
struct CudnnHandles {
  using Handle = cudnnHandle_t;
  static std::vector<Handle>& free_list(DeviceState& s) { return s.free_cudnn; }
  static Handle create();
  static void bind(Handle h, cudaStream_t stream);
};
using CudnnLease = HandleLease<CudnnHandles>;
#endif

bool tf32_allowed();
void set_tf32_allowed(bool allow);

}  // namespace gradus::backend::cuda
