// The CUDA runtime as gradus exposes it: devices and their properties, memory statistics of the
// stream-ordered pool allocator, streams and events, pinned host memory, TF32 control.
//
// The CUDA backend is a module gradus loads at run time (libgradus_backend_cuda.so, see
// backend_status()). Without it, or without a driver or GPU, there are no devices: statistics are
// zero, and the calls that need a device throw DeviceError naming why there is none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gradus/core/device.h"
#include "gradus/core/error.h"

namespace gradus {
class Tensor;
}

namespace gradus::cuda {

struct DeviceProperties {
  int index = 0;
  std::string name;          // "NVIDIA H200"
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t total_memory = 0;  // bytes
  size_t l2_cache_bytes = 0;
  size_t shared_memory_per_block = 0;        // default limit
  size_t shared_memory_per_block_optin = 0;  // with cudaFuncSetAttribute
  size_t shared_memory_per_multiprocessor = 0;
  int max_threads_per_block = 0;
  int max_threads_per_multiprocessor = 0;
  int warp_size = 32;
  int memory_clock_khz = 0;          // 0 when the driver does not report it
  int memory_bus_width = 0;          // bits
  double memory_bandwidth_gbps = 0;  // peak: 2 * clock * bus width / 8 (GB/s)
  int clock_khz = 0;
  std::string pci_bus_id;  // "0000:1b:00.0"
  int driver_version = 0;  // e.g. 13000
  int runtime_version = 0;
};

// Theoretical dense peak FLOP/s per dtype ("fp64", "fp32", "tf32", "bf16", "fp16"; tensor cores
// where the architecture has them, float32 accumulation) from the SM count, the boost clock and
// the per-SM rates of the compute capability (src/core/gpu_peaks.cpp). Empty for an architecture
// the table does not know. Works without CUDA (properties can be filled by hand).
std::vector<std::pair<std::string, double>> peak_flops(const DeviceProperties& p);

// Bytes, per device. `allocated` counts live tensors; `reserved` is what the pool holds from the
// driver (freed blocks are kept for reuse); peaks are since the start or the last reset.
struct MemoryStats {
  size_t allocated = 0;
  size_t peak_allocated = 0;
  size_t reserved = 0;
  size_t peak_reserved = 0;
  size_t free = 0;  // device-wide, from cudaMemGetInfo
  size_t total = 0;
  uint64_t num_allocs = 0;
  uint64_t num_ooms = 0;
};

// cudaStream_t / cudaEvent_t without including CUDA headers.
using StreamHandle = void*;

// "loaded from PATH" when the CUDA backend module is loaded, else why it is not (not built, not
// found, or its CUDA libraries missing: the loader's message). Loads it if not yet tried.
std::string backend_status();
bool backend_loaded();

int device_count();  // 0 without the module, a driver or a GPU; never throws
inline bool is_available() {
  return device_count() > 0;
}
int current_device();
void set_device(int device);
// device = -1 means the current device.
DeviceProperties device_properties(int device = -1);
void synchronize(int device = -1);  // waits for all work on the device
// How many times the host has waited for a GPU since the process started (reading a tensor back,
// synchronize(), Event::synchronize(), a copy from pinned memory that must finish before the
// buffer is reused, ...). A training step that reads nothing back makes none after warm-up:
// compare the count before and after it. 0 without a device.
uint64_t host_syncs();
MemoryStats memory_stats(int device = -1);
void reset_peak_memory_stats(int device = -1);
// Returns the pool's cached free blocks to the driver (synchronizes the device).
void empty_cache(int device = -1);

// TF32 tensor cores for float32 GEMM and convolution (off by default, like PyTorch's matmul;
// GRADUS_ALLOW_TF32=1 in the environment turns it on at start-up).
void set_allow_tf32(bool allow);
bool allow_tf32();

// Attention on a GPU materialises the [batch x heads, Tq, Tk] scores (cuBLASLt GEMMs and a row
// softmax: fast, O(T^2) memory) while they take at most this many bytes, the backward's two such
// buffers counted; larger problems take the streaming kernel (O(T) memory, far slower). Default
// 1 GiB; 0 always streams.
void set_attention_scores_limit(size_t bytes);
size_t attention_scores_limit();

// The stream every kernel of a device runs on, and a second one for input prefetch.
StreamHandle current_stream(int device = -1);
StreamHandle copy_stream(int device = -1);
// Makes `stream` the calling thread's current stream on the device (nullptr restores the
// device's compute stream). Other threads are not affected.
void set_current_stream(StreamHandle stream, int device = -1);

// Runs the enclosed ops of this thread on another stream of the device (e.g. copy_stream()).
// Without a CUDA device it does nothing.
class StreamGuard {
 public:
  StreamGuard(StreamHandle stream, int device = -1);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_ = -1;  // -1: no module, nothing to restore
  StreamHandle previous_ = nullptr;
};

// Marks t's memory as used by work queued on `stream`, a stream other than the one it was
// allocated on (PyTorch's Tensor.record_stream): when the last tensor using the memory dies, its
// block returns to the pool only after the work queued on `stream` so far. Call it after queueing
// that work (e.g. a copy on copy_stream() into a tensor the compute stream allocated).
void record_stream(const Tensor& t, StreamHandle stream);

// A CUDA event (timing enabled). Constructing one without a CUDA device throws DeviceError.
class Event {
 public:
  explicit Event(int device = -1);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(StreamHandle stream = nullptr);      // nullptr = the current stream
  void wait(StreamHandle stream = nullptr) const;  // the stream waits for this event
  void synchronize() const;                        // the host waits
  bool query() const;                              // true when completed
  float elapsed_ms(const Event& end) const;        // between this (start) and end

 private:
  int device_;
  void* event_ = nullptr;
};

// A CUDA graph: a region of this thread's GPU work recorded once and replayed with one launch,
// which removes the host's per-kernel launch cost (the whole of a small model's step).
//
// What a replay does is exactly what was recorded: the same kernels with the same arguments on the
// same memory. So the captured region must
//   * see its inputs in tensors made before the capture (copy each new batch into them first) and
//     leave its results in tensors made before it (copy_ the loss into one); tensors created
//     inside are the graph's own memory and must be gone when the region ends;
//   * read nothing back to the host (item(), to_vector(), printing a tensor), since no host code
//     runs during a replay;
//   * draw no random numbers (dropout): they would be the numbers drawn at capture, every time;
//   * take its changing scalars from device memory: an optimizer in capturable mode
//     (Optimizer::set_capturable) reads its learning rate and step count there.
// Run the region eagerly once or more first (warm-up): gradients, optimizer state and library
// workspaces are then allocated, and the capture only records.
class Graph {
 public:
  explicit Graph(int device = -1);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Records the GPU work that fn queues on the device instead of running it: nothing runs during
  // a capture. The capture uses a stream of its own, so other threads' work is not recorded.
  // Throws GraphCaptureError, with nothing captured, when fn queues work a graph cannot replay
  // (named in the message), throws, or leaves tensors created inside it alive. A graph captures
  // once.
  void capture(const std::function<void()>& fn);
  // Queues the recorded work on the calling thread's current stream of the device.
  void replay();
  bool captured() const { return exec_ != nullptr; }

 private:
  int device_;
  void* exec_ = nullptr;
};

// Whether the calling thread is inside Graph::capture.
bool is_capturing();

// Page-locked host memory (fast, asynchronous transfers). alloc_pinned throws DeviceError
// without a CUDA device; is_pinned is then false.
void* alloc_pinned(size_t nbytes);
void free_pinned(void* ptr);
bool is_pinned(const void* ptr);
// Copies contiguous host bytes into a contiguous CUDA tensor on `stream` (nullptr = current) and
// returns at once: the host buffer must stay untouched until an event recorded after it has
// completed. Use with pinned buffers (pageable memory is staged by the driver). Memory is
// allocated in the order of the device's current stream: before another stream (copy_stream())
// writes a fresh tensor, make it wait for an Event recorded on the current stream, and make the
// current stream wait for the copy before using or freeing the tensor.
void copy_from_host_async(const void* host, const Tensor& dst, StreamHandle stream = nullptr);

}  // namespace gradus::cuda
