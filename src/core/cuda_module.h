// The CUDA backend is a separately built module, libgradus_backend_cuda.so, that gradus loads at
// run time when it is first asked about CUDA (a CUDA tensor, cuda::device_count(), `--device
// auto`). gradus itself links no CUDA library, so one installed gradus runs on machines with and
// without a GPU, and programs built against it need no CUDA toolkit. A module that is absent, or
// that cannot load (its CUDA libraries missing), leaves gradus CPU-only, with the reason kept for
// error messages and `gradus info`.
//
// Where it is looked for, first found wins:
//   1. $GRADUS_CUDA_MODULE (a path; "" or "none" disables CUDA);
//   2. the directory of libgradus_core.so (install and build trees put them side by side);
//   3. the dynamic loader's search path (LD_LIBRARY_PATH, ...).
//
// The module exports one C function, gradus_cuda_module(), returning its Module (a process-
// lifetime singleton). Its methods are the public gradus::cuda API (gradus/core/cuda.h forwards
// each call) plus the backend, the profiler's GPU timer and library versions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gradus/core/cuda.h"

namespace gradus::backend {
class Backend;
}
namespace gradus::profiling {
class DeviceTimer;
}

namespace gradus::cuda::detail {

// Bumped whenever Module changes, so a stale module is refused instead of misread.
inline constexpr int kModuleAbi = 3;

class Module {
 public:
  virtual ~Module() = default;
  virtual int abi() const { return kModuleAbi; }

  virtual backend::Backend* backend() = 0;  // registers the CUDA allocator on first call
  virtual profiling::DeviceTimer* device_timer() = 0;
  virtual std::string cudnn_version() = 0;

  virtual int device_count() = 0;
  virtual int resolve(int device) = 0;  // -1: the current device
  virtual void set_device(int device) = 0;
  virtual DeviceProperties device_properties(int device) = 0;
  virtual void synchronize(int device) = 0;
  virtual uint64_t host_syncs() = 0;
  virtual MemoryStats memory_stats(int device) = 0;
  virtual void reset_peak_memory_stats(int device) = 0;
  virtual void empty_cache(int device) = 0;
  virtual void set_allow_tf32(bool allow) = 0;
  virtual bool allow_tf32() = 0;

  virtual StreamHandle current_stream(int device) = 0;
  virtual StreamHandle copy_stream(int device) = 0;
  virtual void set_current_stream(StreamHandle stream, int device) = 0;
  virtual void record_stream(const Tensor& t, StreamHandle stream) = 0;

  virtual void* event_create(int device) = 0;
  virtual void event_destroy(void* event) = 0;
  virtual void event_record(int device, void* event, StreamHandle stream) = 0;
  virtual void event_wait(int device, void* event, StreamHandle stream) = 0;
  virtual void event_synchronize(void* event) = 0;
  virtual bool event_query(void* event) = 0;
  virtual float event_elapsed_ms(void* start, void* end) = 0;

  // Graph::capture: returns the instantiated graph (cudaGraphExec_t).
  virtual void* graph_capture(int device, const std::function<void()>& fn) = 0;
  virtual void graph_replay(int device, void* exec) = 0;
  virtual void graph_destroy(int device, void* exec) = 0;
  virtual bool is_capturing() = 0;

  virtual void* alloc_pinned(size_t nbytes) = 0;
  virtual void free_pinned(void* ptr) = 0;
  virtual bool is_pinned(const void* ptr) = 0;
  virtual void copy_from_host_async(const void* host, const Tensor& dst, StreamHandle stream) = 0;
};

// The loaded module; loads it on the first call (thread-safe). nullptr when there is none.
Module* module();

}  // namespace gradus::cuda::detail

// The symbol the module defines.
extern "C" gradus::cuda::detail::Module* gradus_cuda_module();
