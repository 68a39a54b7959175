// The CUDA runtime layer: devices, streams, the stream-ordered pool allocator with its statistics,
// library handles, host transfers, the public gradus::cuda API and the backend singleton.
//
// Nothing here touches the driver before a CUDA device is actually used: cuda_backend() runs at
// static-initialisation time (src/ops/dispatch.cpp) on machines that may have no GPU or driver.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/runtime.h"
#include "core/oom_hint.h"

#include "core/stream_order.h"
#include "gradus/core/cuda.h"

namespace gradus::backend::cuda {

// ------------------------------------------------------------------------------- errors
void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line,
                      const char* op) {
  const std::string msg =
      detail::str_cat(op, ": CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
                      ") in ", call, " at ", file, ":", line);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it so later calls work
    throw OutOfMemoryError(msg);
  }
  if (err == cudaErrorNoDevice || err == cudaErrorInvalidDevice ||
      err == cudaErrorInsufficientDriver) {
    throw DeviceError(msg);
  }
  // A faulting kernel is reported by whichever call next waits on the device, under that call's
  // name, not at the kernel that faulted.
  if (err == cudaErrorIllegalAddress || err == cudaErrorLaunchFailure ||
      err == cudaErrorMisalignedAddress || err == cudaErrorIllegalInstruction ||
      err == cudaErrorInvalidPc || err == cudaErrorHardwareStackError || err == cudaErrorAssert ||
      err == cudaErrorInvalidAddressSpace) {
    throw Error(detail::str_cat(
        msg,
        "; a kernel fault surfaces at the next call that waits on the device, which may not be "
        "the op that launched the faulty kernel: rerun with CUDA_LAUNCH_BLOCKING=1 (every launch "
        "waits, so the error names the kernel's op) or under compute-sanitizer to find it"));
  }
  throw Error(msg);
}

void throw_library_error(const char* library, int status, const char* status_name, const char* call,
                         const char* file, int line, const char* op) {
  throw Error(detail::str_cat(op, ": ", library, " error ", status, " (",
                              status_name ? status_name : "?", ") in ", call, " at ", file, ":",
                              line));
}

namespace {

std::string format_bytes(size_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024));
  } else if (b >= 1024.0) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  }
  return buf;
}

// Leaked on purpose: tensors may be freed during static destruction, after which a destroyed
// state would be used. A function so that it exists whatever the static-initialisation order.
DeviceState* states() {
  static DeviceState* const s = new DeviceState[kMaxDevices];
  return s;
}
std::once_flag g_state_once[kMaxDevices];

std::atomic<int> g_tf32{-1};  // -1: read GRADUS_ALLOW_TF32 on first use

size_t pool_reserved(const DeviceState& s, cudaMemPoolAttr attr) {
  uint64_t v = 0;
  if (cudaMemPoolGetAttribute(s.pool, attr, &v) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<size_t>(v);
}

void init_device(DeviceState& s, int index) {
  s.index = index;
  DeviceGuard guard(index);
  GRADUS_CUDA_CHECK("cuda init", cudaGetDeviceProperties(&s.props, index));
  GRADUS_CUDA_CHECK("cuda init",
                    cudaStreamCreateWithFlags(&s.default_stream, cudaStreamNonBlocking));
  GRADUS_CUDA_CHECK("cuda init", cudaStreamCreateWithFlags(&s.copy_stream, cudaStreamNonBlocking));
  GRADUS_CUDA_CHECK("cuda init", cudaDeviceGetDefaultMemPool(&s.pool, index));
  // Keep freed blocks in the pool instead of returning them to the driver at every sync.
  uint64_t threshold = UINT64_MAX;
  GRADUS_CUDA_CHECK("cuda init",
                    cudaMemPoolSetAttribute(s.pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  void* record = nullptr;
  GRADUS_CUDA_CHECK("cuda init", cudaHostAlloc(&record, sizeof(DeviceIndexError),
                                               cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(record, 0, sizeof(DeviceIndexError));
  s.index_error = static_cast<DeviceIndexError*>(record);
  void* on_device = nullptr;
  GRADUS_CUDA_CHECK("cuda init", cudaHostGetDevicePointer(&on_device, record, 0));
  s.index_error_on_device = static_cast<DeviceIndexError*>(on_device);
  GRADUS_CUDA_CHECK("cuda init", cudaMalloc(&s.index_error_claim, sizeof(int)));
  GRADUS_CUDA_CHECK("cuda init", cudaMemset(s.index_error_claim, 0, sizeof(int)));
  s.ready.store(true);
}

}  // namespace

// ------------------------------------------------------------------------------- devices
int device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    return n < kMaxDevices ? n : kMaxDevices;
  }();
  return count;
}

DeviceState* ready_state(int index) {
  if (index < 0 || index >= device_count()) return nullptr;
  DeviceState& s = states()[index];
  return s.ready.load() ? &s : nullptr;
}

DeviceState& device_state(int index) {
  const int count = device_count();
  GRADUS_CHECK(index >= 0 && index < count, DeviceError, "cuda:", index, " is not available: ",
               count == 0 ? "no CUDA device (or driver) was found"
                          : detail::str_cat(count, " CUDA device(s) visible"));
  std::call_once(g_state_once[index], [&] { init_device(states()[index], index); });
  return states()[index];
}

namespace {
// This thread's stream per device; nullptr = the device's compute stream.
thread_local cudaStream_t t_streams[kMaxDevices] = {};
}  // namespace

cudaStream_t stream_of(int index) {
  cudaStream_t s = t_streams[index];
  return s != nullptr ? s : device_state(index).default_stream;
}

void set_thread_stream(int index, cudaStream_t stream) {
  device_state(index);  // validates the index
  t_streams[index] = stream;
}

DeviceGuard::DeviceGuard(int index) {
  int current = -1;
  GRADUS_CUDA_CHECK("set device", cudaGetDevice(&current));
  if (current != index) {
    GRADUS_CUDA_CHECK("set device", cudaSetDevice(index));
    previous_ = current;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

bool tf32_allowed() {
  int v = g_tf32.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("GRADUS_ALLOW_TF32");
    v = env != nullptr && (std::strcmp(env, "1") == 0 || std::strcmp(env, "true") == 0) ? 1 : 0;
    int expected = -1;
    g_tf32.compare_exchange_strong(expected, v);
    v = g_tf32.load();
  }
  return v == 1;
}

void set_tf32_allowed(bool allow) {
  g_tf32.store(allow ? 1 : 0);
}

// ------------------------------------------------------------------------------- memory
void* pool_allocate(size_t nbytes, int device, cudaStream_t stream, const char* op) {
  if (nbytes == 0) return nullptr;
  DeviceState& s = device_state(device);
  DeviceGuard guard(device);
  void* ptr = nullptr;
  // More than the device holds cannot succeed: report it without asking the driver.
  cudaError_t err = nbytes > s.props.totalGlobalMem
                        ? cudaErrorMemoryAllocation
                        : cudaMallocFromPoolAsync(&ptr, nbytes, s.pool, stream);
  if (err == cudaErrorMemoryAllocation && nbytes <= s.props.totalGlobalMem) {
    // Blocks freed on other streams become reusable once the device is idle.
    cudaGetLastError();
    count_host_sync();
    cudaDeviceSynchronize();
    err = cudaMallocFromPoolAsync(&ptr, nbytes, s.pool, stream);
  }
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    s.num_ooms.fetch_add(1);
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) cudaGetLastError();
    throw OutOfMemoryError(detail::str_cat(
        op, ": CUDA out of memory on cuda:", device, " allocating ", format_bytes(nbytes),
        " (device: ", format_bytes(free), " free of ", format_bytes(total),
        " total; gradus: ", format_bytes(s.allocated.load()), " allocated by tensors, ",
        format_bytes(pool_reserved(s, cudaMemPoolAttrReservedMemCurrent)),
        " reserved by the pool). ", detail::kOutOfMemoryHint,
        "; gradus::cuda::memory_stats() shows usage."));
  }
  GRADUS_CUDA_CHECK(op, err);
  const size_t now = s.allocated.fetch_add(nbytes) + nbytes;
  size_t peak = s.peak_allocated.load();
  while (now > peak && !s.peak_allocated.compare_exchange_weak(peak, now)) {
  }
  s.num_allocs.fetch_add(1);
  capture_note_allocation(ptr, nbytes, device);
  return ptr;
}

namespace {
// The real calls behind detail::free_after_uses (src/core/stream_order.h).
struct CudaStreamApi {
  cudaEvent_t record_event(void* stream) {
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(e, static_cast<cudaStream_t>(stream)) != cudaSuccess) {
      // Without an event the only safe order is the whole device.
      cudaGetLastError();
      count_host_sync();
      cudaDeviceSynchronize();
    }
    return e;
  }
  void wait_event(void* stream, cudaEvent_t e) {
    if (e != nullptr &&
        cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), e, 0) != cudaSuccess) {
      cudaGetLastError();
      count_host_sync();
      cudaDeviceSynchronize();
    }
  }
  void release_event(cudaEvent_t e) {
    if (e != nullptr) cudaEventDestroy(e);  // its resources go once it has fired
  }
  void free_async(void* ptr, void* stream) {
    if (cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream)) != cudaSuccess) cudaGetLastError();
  }
};
}  // namespace

void pool_free(void* ptr, size_t nbytes, int device, const StreamUses& uses) noexcept {
  if (ptr == nullptr) return;
  if (capture_defers_free(ptr, nbytes, device)) return;  // freed when the capture ends
  DeviceState& s = states()[device];
  s.allocated.fetch_sub(nbytes);
  if (graph_memory_orphaned(ptr)) return;  // a failed capture's graph memory: never real
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    return;  // the runtime is shutting down
  }
  if (current != device) cudaSetDevice(device);
  CudaStreamApi api;
  detail::free_after_uses(api, ptr, uses);
  if (current != device) cudaSetDevice(current);
}

void pool_free(void* ptr, size_t nbytes, int device, cudaStream_t stream) noexcept {
  pool_free(ptr, nbytes, device, StreamUses{stream, {}});
}

Workspace::Workspace(size_t nbytes, int device, const char* op)
    : nbytes_(nbytes), device_(device), stream_(stream_of(device)) {
  data_ = pool_allocate(nbytes, device, stream_, op);
}

Workspace::~Workspace() {
  pool_free(data_, nbytes_, device_, stream_);
}

namespace {

class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, int device_index) override {
    if (nbytes == 0) return nullptr;
    return pool_allocate(nbytes, device_index, stream_of(device_index), "allocate");
  }
  void deallocate(void* ptr, size_t nbytes, int device_index) override {
    pool_free(ptr, nbytes, device_index, stream_of(device_index));
  }
  void* allocation_stream(int device_index) override { return stream_of(device_index); }
  void deallocate_after(void* ptr, size_t nbytes, int device_index,
                        const StreamUses& uses) override {
    pool_free(ptr, nbytes, device_index, uses);
  }
};

}  // namespace

// ------------------------------------------------------------------------------- handles
cublasLtHandle_t lt_handle(int device) {
  DeviceState& s = device_state(device);
  std::lock_guard<std::mutex> lock(s.handle_mu);
  if (s.lt == nullptr) GRADUS_CUBLAS_CHECK("gemm", cublasLtCreate(&s.lt));
  return s.lt;
}

void* gemm_workspace(int device) {
  DeviceState& s = device_state(device);
  const cudaStream_t stream = stream_of(device);
  std::lock_guard<std::mutex> lock(s.handle_mu);
  void*& ws = s.gemm_workspaces[stream];
  // Allocated in the order of the stream that uses it: no synchronisation needed.
  if (ws == nullptr) ws = pool_allocate(kGemmWorkspaceBytes, device, stream, "gemm workspace");
  return ws;
}

cublasHandle_t BlasHandles::create() {
  cublasHandle_t h = nullptr;
  GRADUS_CUBLAS_CHECK("gemm", cublasCreate(&h));
  return h;
}

void BlasHandles::bind(cublasHandle_t h, cudaStream_t stream) {
  GRADUS_CUBLAS_CHECK("gemm", cublasSetStream(h, stream));
}

#if GRADUS_HAS_CUDNN
cudnnHandle_t CudnnHandles::create() {
  cudnnHandle_t h = nullptr;
  GRADUS_CUDNN_CHECK("conv2d", cudnnCreate(&h));
  return h;
}

void CudnnHandles::bind(cudnnHandle_t h, cudaStream_t stream) {
  GRADUS_CUDNN_CHECK("conv2d", cudnnSetStream(h, stream));
}
#endif

// ------------------------------------------------------------------------------- backend
void CudaBackend::synchronize() {
  const int n = device_count();
  for (int d = 0; d < n; ++d) {
    // Only devices that were used have work to wait for (and waking the others would create
    // their contexts).
    if (!states()[d].ready.load()) continue;
    DeviceGuard guard(d);
    wait_device(d, "synchronize");
  }
}

void CudaBackend::copy_from_host(const void* host, const Tensor& dst) {
  const size_t nbytes = static_cast<size_t>(dst.numel()) * dst.element_size();
  if (nbytes == 0) return;
  const int device = dst.device().index();
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  GRADUS_CUDA_CHECK("copy to cuda",
                    cudaMemcpyAsync(dst.raw_data(), host, nbytes, cudaMemcpyHostToDevice, stream));
  // Pageable sources are staged by the driver before the call returns; a pinned source is read
  // asynchronously, so wait until the caller may reuse it (gradus::cuda::copy_from_host_async
  // is the non-blocking variant).
  if (gradus::cuda::is_pinned(host)) wait_stream(stream, device, "copy to cuda");
}

void CudaBackend::copy_to_host(const Tensor& src, void* host) {
  const size_t nbytes = static_cast<size_t>(src.numel()) * src.element_size();
  if (nbytes == 0) return;
  const int device = src.device().index();
  DeviceGuard guard(device);
  cudaStream_t stream = stream_of(device);
  // Refused before the copy is enqueued: inside a capture the copy itself would fail with a CUDA
  // error instead of the GraphCaptureError that names the read.
  refuse_host_wait("copy from cuda");
  GRADUS_CUDA_CHECK("copy from cuda",
                    cudaMemcpyAsync(host, src.raw_data(), nbytes, cudaMemcpyDeviceToHost, stream));
  wait_stream(stream, device, "copy from cuda");
}

namespace {
// Peer access from `device` to `peer`'s memory, enabled once per pair where the hardware allows
// it (NVLink or PCIe P2P); without it cudaMemcpyPeerAsync still works, staged by the driver.
// Memory of a stream-ordered pool is not covered by cudaDeviceEnablePeerAccess: the peer's pool
// must also grant `device` access to its blocks (cudaMemPoolSetAccess), as every tensor's block
// comes from that pool.
void enable_peer_access(int device, int peer) {
  static std::once_flag once[kMaxDevices][kMaxDevices];
  std::call_once(once[device][peer], [&] {
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess || can == 0) {
      cudaGetLastError();
      return;
    }
    {
      DeviceGuard guard(device);
      const cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
      if (err != cudaSuccess) cudaGetLastError();  // already enabled (by another library) is fine
    }
    cudaMemAccessDesc access{};
    access.location.type = cudaMemLocationTypeDevice;
    access.location.id = device;
    access.flags = cudaMemAccessFlagsProtReadWrite;
    GRADUS_CUDA_CHECK("copy between devices (pool access)",
                      cudaMemPoolSetAccess(device_state(peer).pool, &access, 1));
  });
}

// An event recorded on `stream` of `device` that `waiter` waits for: the waiter's later work runs
// after the stream's work so far. Destroyed at once (the driver keeps it until it fires).
void stream_wait(int device, cudaStream_t stream, cudaStream_t waiter, const char* op) {
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  GRADUS_CUDA_CHECK(op, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  GRADUS_CUDA_CHECK(op, cudaEventRecord(e, stream));
  const cudaError_t err = cudaStreamWaitEvent(waiter, e, 0);
  cudaEventDestroy(e);
  GRADUS_CUDA_CHECK(op, err);
}
}  // namespace

void CudaBackend::copy_between_devices(const Tensor& src, const Tensor& dst) {
  const size_t nbytes = static_cast<size_t>(dst.numel()) * dst.element_size();
  if (nbytes == 0) return;
  const int from = src.device().index(), to = dst.device().index();
  cudaStream_t src_stream = stream_of(from), dst_stream = stream_of(to);
  enable_peer_access(to, from);
  // The copy runs on the destination's stream after the source's producers, and the source's
  // stream waits for the copy before anything it queues later, so src's block is not handed out
  // again before the copy has read it.
  stream_wait(from, src_stream, dst_stream, "copy between devices");
  {
    DeviceGuard guard(to);
    GRADUS_CUDA_CHECK(
        "copy between devices",
        cudaMemcpyPeerAsync(dst.raw_data(), to, src.raw_data(), from, nbytes, dst_stream));
  }
  stream_wait(to, dst_stream, src_stream, "copy between devices");
  // src may have been allocated on another stream of its device: its block then also waits for
  // this one (which now waits for the copy).
  src.impl()->storage()->record_stream(src_stream);
}

}  // namespace gradus::backend::cuda

namespace gradus::backend {

// Registers the allocator; touches no CUDA API (see file comment).
Backend* cuda_backend() {
  static Backend* const instance = [] {
    static cuda::CudaAllocator* allocator = new cuda::CudaAllocator();
    register_allocator(DeviceType::CUDA, allocator);
    return static_cast<Backend*>(new cuda::CudaBackend());
  }();
  return instance;
}

}  // namespace gradus::backend
