// The module's entry point (src/core/cuda_module.h): the public gradus::cuda API of
// include/gradus/core/cuda.h on top of the backend's runtime, which core forwards each call to.
#include "backend/backend.h"
#include "backend/cuda/runtime.h"
#include "core/cuda_module.h"
#include "gradus/core/cuda.h"
#include "gradus/core/tensor.h"

namespace gradus::backend {
profiling::DeviceTimer* cuda_device_timer();  // profiler_timer.cpp
std::string cudnn_version();                  // cudnn_version.cpp
}  // namespace gradus::backend

namespace gradus::cuda {
namespace {

namespace rt = backend::cuda;

int resolve(int device) {
  if (device >= 0) return device;
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = 0;
  }
  return current;
}

class CudaModule final : public detail::Module {
 public:
  backend::Backend* backend() override { return backend::cuda_backend(); }
  profiling::DeviceTimer* device_timer() override { return backend::cuda_device_timer(); }
  std::string cudnn_version() override { return backend::cudnn_version(); }
  int device_count() override { return rt::device_count(); }
  int resolve(int device) override { return cuda::resolve(device); }
  void set_device(int device) override;
  DeviceProperties device_properties(int device) override;
  void synchronize(int device) override;
  uint64_t host_syncs() override { return rt::host_syncs(); }
  MemoryStats memory_stats(int device) override;
  void reset_peak_memory_stats(int device) override;
  void empty_cache(int device) override;
  void set_allow_tf32(bool allow) override { rt::set_tf32_allowed(allow); }
  bool allow_tf32() override { return rt::tf32_allowed(); }
  StreamHandle current_stream(int device) override { return rt::stream_of(cuda::resolve(device)); }
  StreamHandle copy_stream(int device) override {
    return rt::device_state(cuda::resolve(device)).copy_stream;
  }
  void set_current_stream(StreamHandle stream, int device) override {
    rt::set_thread_stream(cuda::resolve(device), static_cast<cudaStream_t>(stream));
  }
  void record_stream(const Tensor& t, StreamHandle stream) override;
  void* event_create(int device) override;
  void event_destroy(void* event) override { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
  void event_record(int device, void* event, StreamHandle stream) override;
  void event_wait(int device, void* event, StreamHandle stream) override;
  void event_synchronize(void* event) override;
  bool event_query(void* event) override;
  float event_elapsed_ms(void* start, void* end) override;
  void* graph_capture(int device, const std::function<void()>& fn) override {
    return rt::capture_graph(device, fn);
  }
  void graph_replay(int device, void* exec) override { rt::replay_graph(device, exec); }
  void graph_destroy(int device, void* exec) override { rt::destroy_graph(device, exec); }
  bool is_capturing() override { return rt::capturing_device() >= 0; }
  void* alloc_pinned(size_t nbytes) override;
  void free_pinned(void* ptr) override { cudaFreeHost(ptr); }
  bool is_pinned(const void* ptr) override;
  void copy_from_host_async(const void* host, const Tensor& dst, StreamHandle stream) override;
};

void CudaModule::set_device(int device) {
  rt::device_state(device);  // validates the index
  GRADUS_CUDA_CHECK("cuda::set_device", cudaSetDevice(device));
}

DeviceProperties CudaModule::device_properties(int device) {
  device = resolve(device);
  const rt::DeviceState& s = rt::device_state(device);
  const cudaDeviceProp& p = s.props;
  DeviceProperties d;
  d.index = device;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  d.total_memory = p.totalGlobalMem;
  d.l2_cache_bytes = static_cast<size_t>(p.l2CacheSize);
  d.shared_memory_per_block = p.sharedMemPerBlock;
  d.shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
  d.shared_memory_per_multiprocessor = p.sharedMemPerMultiprocessor;
  d.max_threads_per_block = p.maxThreadsPerBlock;
  d.max_threads_per_multiprocessor = p.maxThreadsPerMultiProcessor;
  d.warp_size = p.warpSize;
  // CUDA 13 dropped memoryClockRate / clockRate from cudaDeviceProp: ask the attributes.
  int mem_clock = 0, clock = 0;
  if (cudaDeviceGetAttribute(&mem_clock, cudaDevAttrMemoryClockRate, device) != cudaSuccess) {
    cudaGetLastError();
    mem_clock = 0;
  }
  if (cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, device) != cudaSuccess) {
    cudaGetLastError();
    clock = 0;
  }
  d.memory_clock_khz = mem_clock;
  d.clock_khz = clock;
  d.memory_bus_width = p.memoryBusWidth;
  // Double data rate: two transfers per clock, bus width in bits.
  d.memory_bandwidth_gbps = 2.0 * static_cast<double>(mem_clock) * 1e3 *
                            (static_cast<double>(p.memoryBusWidth) / 8.0) / 1e9;
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) == cudaSuccess) {
    d.pci_bus_id = bus;
  } else {
    cudaGetLastError();
  }
  if (cudaDriverGetVersion(&d.driver_version) != cudaSuccess) cudaGetLastError();
  if (cudaRuntimeGetVersion(&d.runtime_version) != cudaSuccess) cudaGetLastError();
  return d;
}

void CudaModule::synchronize(int device) {
  device = resolve(device);
  rt::device_state(device);
  rt::DeviceGuard guard(device);
  rt::wait_device(device, "cuda::synchronize");
}

MemoryStats CudaModule::memory_stats(int device) {
  MemoryStats m;
  if (rt::device_count() == 0) return m;
  device = resolve(device);
  rt::DeviceState& s = rt::device_state(device);
  rt::DeviceGuard guard(device);
  m.allocated = s.allocated.load();
  m.peak_allocated = s.peak_allocated.load();
  uint64_t v = 0;
  GRADUS_CUDA_CHECK("cuda::memory_stats",
                    cudaMemPoolGetAttribute(s.pool, cudaMemPoolAttrReservedMemCurrent, &v));
  m.reserved = static_cast<size_t>(v);
  GRADUS_CUDA_CHECK("cuda::memory_stats",
                    cudaMemPoolGetAttribute(s.pool, cudaMemPoolAttrReservedMemHigh, &v));
  m.peak_reserved = static_cast<size_t>(v);
  GRADUS_CUDA_CHECK("cuda::memory_stats", cudaMemGetInfo(&m.free, &m.total));
  m.num_allocs = s.num_allocs.load();
  m.num_ooms = s.num_ooms.load();
  return m;
}

void CudaModule::reset_peak_memory_stats(int device) {
  if (rt::device_count() == 0) return;
  device = resolve(device);
  rt::DeviceState& s = rt::device_state(device);
  s.peak_allocated.store(s.allocated.load());
  uint64_t zero = 0;  // resets the high-water mark to the current value
  GRADUS_CUDA_CHECK("cuda::reset_peak_memory_stats",
                    cudaMemPoolSetAttribute(s.pool, cudaMemPoolAttrReservedMemHigh, &zero));
}

void CudaModule::empty_cache(int device) {
  if (rt::device_count() == 0) return;
  device = resolve(device);
  rt::DeviceState& s = rt::device_state(device);
  rt::DeviceGuard guard(device);
  rt::wait_device(device, "cuda::empty_cache");
  GRADUS_CUDA_CHECK("cuda::empty_cache", cudaMemPoolTrimTo(s.pool, 0));
}

void CudaModule::record_stream(const Tensor& t, StreamHandle stream) {
  GRADUS_CHECK(t.defined() && t.is_cuda(), DeviceError,
               "cuda::record_stream: the tensor must be a defined CUDA tensor");
  t.impl()->storage()->record_stream(stream != nullptr ? stream
                                                       : current_stream(t.device().index()));
}

// ------------------------------------------------------------------------------- events
void* CudaModule::event_create(int device) {
  rt::device_state(device);
  rt::DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  GRADUS_CUDA_CHECK("cuda::Event", cudaEventCreate(&e));
  return e;
}

void CudaModule::event_record(int device, void* event, StreamHandle stream) {
  rt::DeviceGuard guard(device);
  cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : rt::stream_of(device);
  GRADUS_CUDA_CHECK("cuda::Event::record", cudaEventRecord(static_cast<cudaEvent_t>(event), s));
}

void CudaModule::event_wait(int device, void* event, StreamHandle stream) {
  rt::DeviceGuard guard(device);
  cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : rt::stream_of(device);
  GRADUS_CUDA_CHECK("cuda::Event::wait",
                    cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(event), 0));
}

void CudaModule::event_synchronize(void* event) {
  rt::wait_event(static_cast<cudaEvent_t>(event), "cuda::Event::synchronize");
}

bool CudaModule::event_query(void* event) {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  GRADUS_CUDA_CHECK("cuda::Event::query", err);
  return true;
}

float CudaModule::event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  GRADUS_CUDA_CHECK(
      "cuda::Event::elapsed_ms",
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

// ------------------------------------------------------------------------------- pinned memory
void* CudaModule::alloc_pinned(size_t nbytes) {
  GRADUS_CHECK(rt::device_count() > 0, DeviceError,
               "cuda::alloc_pinned: no CUDA device (or driver) was found");
  if (nbytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw OutOfMemoryError(gradus::detail::str_cat("cuda::alloc_pinned: cannot pin ", nbytes,
                                                   " bytes of host memory (hint: a smaller "
                                                   "DataLoaderOptions::prefetch or --batch-size)"));
  }
  GRADUS_CUDA_CHECK("cuda::alloc_pinned", err);
  return p;
}

bool CudaModule::is_pinned(const void* ptr) {
  if (ptr == nullptr || rt::device_count() == 0) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

void CudaModule::copy_from_host_async(const void* host, const Tensor& dst, StreamHandle stream) {
  GRADUS_CHECK(dst.is_cuda() && dst.is_contiguous(), ValueError,
               "cuda::copy_from_host_async: destination must be a contiguous CUDA tensor, got ",
               dst.device().str(), dst.is_contiguous() ? "" : " (non-contiguous)");
  const size_t nbytes = static_cast<size_t>(dst.numel()) * dst.element_size();
  if (nbytes == 0) return;
  const int device = dst.device().index();
  rt::DeviceGuard guard(device);
  cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : rt::stream_of(device);
  GRADUS_CUDA_CHECK("cuda::copy_from_host_async",
                    cudaMemcpyAsync(dst.raw_data(), host, nbytes, cudaMemcpyHostToDevice, s));
}

}  // namespace
}  // namespace gradus::cuda

extern "C" gradus::cuda::detail::Module* gradus_cuda_module() {
  static gradus::cuda::CudaModule* const module = new gradus::cuda::CudaModule;  // never destroyed
  return module;
}
