// Loads the CUDA backend module (src/core/cuda_module.h) and forwards the public gradus::cuda API
// (gradus/core/cuda.h) to it. Without the module every call behaves as on a machine with no GPU.
#include "core/cuda_module.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/shared_library.h"
#include "gradus/core/cuda_libraries.h"
#include "gradus/core/device.h"
#include "gradus/core/profiling.h"

namespace gradus::cuda {
namespace detail {
namespace {

constexpr const char* kModuleFile = "libgradus_backend_cuda.so";

struct Loaded {
  Module* module = nullptr;
  std::string status;
};

using gradus::detail::library_directory;
using gradus::detail::open_module;
using gradus::detail::OpenedModule;

Loaded load() {
  OpenedModule opened;
  if (const char* env = std::getenv("GRADUS_CUDA_MODULE")) {
    const std::string chosen = env;
    if (chosen.empty() || chosen == "none") {
      return {nullptr, "disabled (GRADUS_CUDA_MODULE=" + chosen + ")"};
    }
    opened = open_module(chosen, "");
  } else {  // beside libgradus_core, else wherever the dynamic loader finds it
    opened = open_module(kModuleFile, library_directory(reinterpret_cast<void*>(&load)));
  }
  const std::string& path = opened.path;
  if (opened.handle == nullptr) {
    if (opened.missing) {
      return {nullptr, std::string("not installed (no ") + kModuleFile + " beside " +
                           library_directory(reinterpret_cast<void*>(&load)) +
                           "libgradus_core.so nor on the loader's path; "
                           "build gradus with -DGRADUS_USE_CUDA=ON where the CUDA toolkit is)"};
    }
    // The usual cause on a machine with a GPU: the CUDA runtime libraries the module links
    // (libcudart, cuBLAS, cuDNN) are not where the dynamic loader looks.
    const bool runtime_missing = opened.error.find("libcu") != std::string::npos ||
                                 opened.error.find("libnvrtc") != std::string::npos;
    return {nullptr,
            path + " did not load: " + opened.error +
                (runtime_missing ? " (a CUDA runtime library it needs was not found: install the "
                                   "CUDA runtime, cuBLAS and cuDNN, or add their directory to "
                                   "LD_LIBRARY_PATH)"
                                 : "")};
  }
  auto entry = reinterpret_cast<Module* (*)()>(dlsym(opened.handle, "gradus_cuda_module"));
  if (entry == nullptr) return {nullptr, path + " does not define gradus_cuda_module()"};
  Module* m = entry();
  if (m == nullptr || m->abi() != kModuleAbi) {
    return {nullptr, path + " was built for another version of gradus (module ABI " +
                         (m == nullptr ? std::string("?") : std::to_string(m->abi())) +
                         ", expected " + std::to_string(kModuleAbi) + ")"};
  }
  m->backend();  // registers the CUDA allocator (no CUDA call yet)
  profiling::set_device_timer(m->device_timer());
  return {m, "loaded from " + path};
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

// Whether a device can exist at all: without the NVIDIA driver's libcuda.so.1 there is none, and
// finding that out costs one failed dlopen, where loading the module maps cudart, cuBLAS(Lt) and
// cuDNN (0.4 s, most of the start-up of a CPU-only process in a CUDA build). A module named by
// $GRADUS_CUDA_MODULE is always asked: it may bring its own idea of a device.
bool no_driver() {
  static const bool none = std::getenv("GRADUS_CUDA_MODULE") == nullptr &&
                           dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr;
  return none;
}

[[noreturn]] void no_cuda(const char* what) {
  throw DeviceError(std::string(what) + ": no CUDA device (" + loaded().status + ")");
}

Module& require(const char* what) {
  Module* m = loaded().module;
  if (m == nullptr) no_cuda(what);
  return *m;
}

}  // namespace

Module* module() {
  return loaded().module;
}

}  // namespace detail

using detail::Module;
using detail::module;
using detail::require;

std::string backend_status() {
  return detail::loaded().status;
}
bool backend_loaded() {
  return module() != nullptr;
}
std::string cudnn_version() {
  Module* m = module();
  return m != nullptr ? m->cudnn_version()
                      : "not available (CUDA backend " + backend_status() + ")";
}

int device_count() {
  if (detail::no_driver()) return 0;
  Module* m = module();
  return m != nullptr ? m->device_count() : 0;
}
int current_device() {
  Module* m = module();
  return m != nullptr ? m->resolve(-1) : 0;
}
void set_device(int device) {
  require("cuda::set_device").set_device(device);
}
DeviceProperties device_properties(int device) {
  return require("cuda::device_properties").device_properties(device);
}
void synchronize(int device) {
  if (Module* m = module(); m != nullptr && m->device_count() > 0) m->synchronize(device);
}
uint64_t host_syncs() {
  Module* m = module();
  return m != nullptr ? m->host_syncs() : 0;
}
MemoryStats memory_stats(int device) {
  Module* m = module();
  return m != nullptr ? m->memory_stats(device) : MemoryStats{};
}
void reset_peak_memory_stats(int device) {
  if (Module* m = module()) m->reset_peak_memory_stats(device);
}
void empty_cache(int device) {
  if (Module* m = module()) m->empty_cache(device);
}
void set_allow_tf32(bool allow) {
  if (Module* m = module()) m->set_allow_tf32(allow);
}
bool allow_tf32() {
  Module* m = module();
  return m != nullptr && m->allow_tf32();
}

namespace {
std::atomic<size_t> g_attention_scores_limit{size_t{1} << 30};
}  // namespace
void set_attention_scores_limit(size_t bytes) {
  g_attention_scores_limit.store(bytes);
}
size_t attention_scores_limit() {
  return g_attention_scores_limit.load();
}

StreamHandle current_stream(int device) {
  Module* m = module();
  return m != nullptr && m->device_count() > 0 ? m->current_stream(device) : nullptr;
}
StreamHandle copy_stream(int device) {
  Module* m = module();
  return m != nullptr && m->device_count() > 0 ? m->copy_stream(device) : nullptr;
}
void set_current_stream(StreamHandle stream, int device) {
  if (Module* m = module(); m != nullptr && m->device_count() > 0) {
    m->set_current_stream(stream, device);
  }
}

StreamGuard::StreamGuard(StreamHandle stream, int device) {
  Module* m = module();
  if (m == nullptr || m->device_count() == 0) return;
  device_ = m->resolve(device);
  previous_ = m->current_stream(device_);
  m->set_current_stream(stream, device_);
}
StreamGuard::~StreamGuard() {
  if (device_ >= 0) module()->set_current_stream(previous_, device_);
}

void record_stream(const Tensor& t, StreamHandle stream) {
  if (Module* m = module()) m->record_stream(t, stream);
}

Event::Event(int device) : device_(require("cuda::Event").resolve(device)) {
  event_ = module()->event_create(device_);
}
Event::~Event() {
  if (event_ != nullptr) module()->event_destroy(event_);
}
void Event::record(StreamHandle stream) {
  module()->event_record(device_, event_, stream);
}
void Event::wait(StreamHandle stream) const {
  module()->event_wait(device_, event_, stream);
}
void Event::synchronize() const {
  module()->event_synchronize(event_);
}
bool Event::query() const {
  return module()->event_query(event_);
}
float Event::elapsed_ms(const Event& end) const {
  return module()->event_elapsed_ms(event_, end.event_);
}

Graph::Graph(int device) : device_(require("cuda::Graph").resolve(device)) {}
Graph::~Graph() {
  if (exec_ != nullptr) module()->graph_destroy(device_, exec_);
}
void Graph::capture(const std::function<void()>& fn) {
  GRADUS_CHECK(exec_ == nullptr, GraphCaptureError,
               "cuda::Graph::capture: this graph already holds a capture (make a new Graph)");
  exec_ = module()->graph_capture(device_, fn);
}
void Graph::replay() {
  GRADUS_CHECK(exec_ != nullptr, GraphCaptureError,
               "cuda::Graph::replay: nothing was captured (call capture first)");
  module()->graph_replay(device_, exec_);
}
bool is_capturing() {
  if (detail::no_driver()) return false;
  Module* m = module();
  return m != nullptr && m->is_capturing();
}

void* alloc_pinned(size_t nbytes) {
  return require("cuda::alloc_pinned").alloc_pinned(nbytes);
}
void free_pinned(void* ptr) {
  if (ptr != nullptr) require("cuda::free_pinned").free_pinned(ptr);
}
bool is_pinned(const void* ptr) {
  Module* m = module();
  return m != nullptr && m->is_pinned(ptr);
}
void copy_from_host_async(const void* host, const Tensor& dst, StreamHandle stream) {
  require("cuda::copy_from_host_async").copy_from_host_async(host, dst, stream);
}

}  // namespace gradus::cuda
