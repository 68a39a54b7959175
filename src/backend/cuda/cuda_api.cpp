// The public gradus::cuda API (include/gradus/core/cuda.h) on top of the backend's runtime.
#include "backend/cuda/runtime.h"
#include "gradus/core/cuda.h"
#include "gradus/core/tensor.h"

namespace gradus::cuda {

namespace rt = backend::cuda;

namespace {
int resolve(int device) {
  if (device >= 0) return device;
  int current = 0;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = 0;
  }
  return current;
}
}  // namespace

int device_count() {
  return rt::device_count();
}

int current_device() {
  return resolve(-1);
}

void set_device(int device) {
  rt::device_state(device);  // validates the index
  GRADUS_CUDA_CHECK("cuda::set_device", cudaSetDevice(device));
}

DeviceProperties device_properties(int device) {
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

void synchronize(int device) {
  device = resolve(device);
  rt::device_state(device);
  rt::DeviceGuard guard(device);
  GRADUS_CUDA_CHECK("cuda::synchronize", cudaDeviceSynchronize());
}

MemoryStats memory_stats(int device) {
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

void reset_peak_memory_stats(int device) {
  if (rt::device_count() == 0) return;
  device = resolve(device);
  rt::DeviceState& s = rt::device_state(device);
  s.peak_allocated.store(s.allocated.load());
  uint64_t zero = 0;  // resets the high-water mark to the current value
  GRADUS_CUDA_CHECK("cuda::reset_peak_memory_stats",
                    cudaMemPoolSetAttribute(s.pool, cudaMemPoolAttrReservedMemHigh, &zero));
}

void empty_cache(int device) {
  if (rt::device_count() == 0) return;
  device = resolve(device);
  rt::DeviceState& s = rt::device_state(device);
  rt::DeviceGuard guard(device);
  GRADUS_CUDA_CHECK("cuda::empty_cache", cudaDeviceSynchronize());
  GRADUS_CUDA_CHECK("cuda::empty_cache", cudaMemPoolTrimTo(s.pool, 0));
}

void set_allow_tf32(bool allow) {
  rt::set_tf32_allowed(allow);
}
bool allow_tf32() {
  return rt::tf32_allowed();
}

// ------------------------------------------------------------------------------- streams
StreamHandle current_stream(int device) {
  return rt::stream_of(resolve(device));
}

StreamHandle copy_stream(int device) {
  return rt::device_state(resolve(device)).copy_stream;
}

void set_current_stream(StreamHandle stream, int device) {
  rt::set_thread_stream(resolve(device), static_cast<cudaStream_t>(stream));
}

StreamGuard::StreamGuard(StreamHandle stream, int device)
    : device_(resolve(device)), previous_(current_stream(device_)) {
  set_current_stream(stream, device_);
}

StreamGuard::~StreamGuard() {
  rt::set_thread_stream(device_, static_cast<cudaStream_t>(previous_));
}

void record_stream(const Tensor& t, StreamHandle stream) {
  GRADUS_CHECK(t.defined() && t.is_cuda(), DeviceError,
               "cuda::record_stream: the tensor must be a defined CUDA tensor");
  t.impl()->storage()->record_stream(stream != nullptr ? stream
                                                       : current_stream(t.device().index()));
}

// ------------------------------------------------------------------------------- events
Event::Event(int device) : device_(resolve(device)) {
  rt::device_state(device_);
  rt::DeviceGuard guard(device_);
  cudaEvent_t e = nullptr;
  GRADUS_CUDA_CHECK("cuda::Event", cudaEventCreate(&e));
  event_ = e;
}

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void Event::record(StreamHandle stream) {
  rt::DeviceGuard guard(device_);
  cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : rt::stream_of(device_);
  GRADUS_CUDA_CHECK("cuda::Event::record", cudaEventRecord(static_cast<cudaEvent_t>(event_), s));
}

void Event::wait(StreamHandle stream) const {
  rt::DeviceGuard guard(device_);
  cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : rt::stream_of(device_);
  GRADUS_CUDA_CHECK("cuda::Event::wait",
                    cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(event_), 0));
}

void Event::synchronize() const {
  GRADUS_CUDA_CHECK("cuda::Event::synchronize",
                    cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
}

bool Event::query() const {
  const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  GRADUS_CUDA_CHECK("cuda::Event::query", err);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  GRADUS_CUDA_CHECK("cuda::Event::elapsed_ms",
                    cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(event_),
                                         static_cast<cudaEvent_t>(end.event_)));
  return ms;
}

// ------------------------------------------------------------------------------- pinned memory
void* alloc_pinned(size_t nbytes) {
  GRADUS_CHECK(rt::device_count() > 0, DeviceError,
               "cuda::alloc_pinned: no CUDA device (or driver) was found");
  if (nbytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw OutOfMemoryError(detail::str_cat("cuda::alloc_pinned: cannot pin ", nbytes,
                                           " bytes of host memory (hint: a smaller "
                                           "DataLoaderOptions::prefetch or --batch-size)"));
  }
  GRADUS_CUDA_CHECK("cuda::alloc_pinned", err);
  return p;
}

void free_pinned(void* ptr) {
  if (ptr != nullptr) cudaFreeHost(ptr);
}

bool is_pinned(const void* ptr) {
  if (ptr == nullptr || rt::device_count() == 0) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

void copy_from_host_async(const void* host, const Tensor& dst, StreamHandle stream) {
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

}  // namespace gradus::cuda
