// CUDA graphs (gradus::cuda::Graph): stream capture of a region of one thread's work, checked so
// that what is captured can be replayed.
//
// The capture runs on a stream of its own (one per device, one capture at a time), ordered after
// the work the thread had queued, in thread-local capture mode: other threads keep working, and
// their work is not recorded. The stream-ordered allocator needs nothing special: an allocation
// made during the capture becomes an allocation node of the graph (its memory is the graph's),
// and its free a free node. Two things are checked here, because the driver would accept them
// and a replay would then go wrong:
//   * a block allocated during the capture and still alive at its end belongs to a tensor that
//     escaped the region; each replay would need that memory again, so the capture is refused;
//   * a block allocated before the capture and freed during it cannot be freed by the graph, and
//     every replay still reads or writes it: the graph keeps it, and it goes back to the pool
//     when the graph is destroyed (after the graph's last launch, in stream order). Freed at the
//     end of the capture, another tensor could be given the block while replays still use it.
// Host waits (item(), synchronize) and new random numbers are refused where they are asked for
// (device_checks.cpp, misc.cpp), with a message naming them.
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "backend/cuda/runtime.h"

namespace gradus::backend::cuda {
namespace {

struct Capture {
  int device = -1;
  std::unordered_map<void*, size_t> live;          // allocated during the capture, not freed
  std::vector<std::pair<void*, size_t>> deferred;  // allocated before it, freed during it
};

thread_local Capture* t_capture = nullptr;

// What capture_graph hands out: the instantiated graph and the blocks it keeps alive.
struct CapturedGraph {
  cudaGraphExec_t exec = nullptr;
  std::vector<std::pair<void*, size_t>> kept;  // allocated before the capture, freed during it
};

// Addresses of graph memory from captures that failed: no graph will ever back them, so the
// tensors still holding them (created inside the failed region) must not free them.
std::mutex g_orphans_mu;
std::unordered_set<void*> g_orphans;
std::atomic<bool> g_has_orphans{false};

void orphan(const std::unordered_map<void*, size_t>& live) {
  if (live.empty()) return;
  std::lock_guard<std::mutex> lock(g_orphans_mu);
  for (const auto& [ptr, nbytes] : live) g_orphans.insert(ptr);
  g_has_orphans.store(true);
}

size_t total_bytes(const std::unordered_map<void*, size_t>& blocks) {
  size_t n = 0;
  for (const auto& [ptr, nbytes] : blocks) n += nbytes;
  return n;
}

}  // namespace

int capturing_device() noexcept {
  return t_capture != nullptr ? t_capture->device : -1;
}

void throw_capture_refusal(const std::string& what) {
  throw GraphCaptureError(
      detail::str_cat("cuda::Graph::capture: ", what, " cannot be part of a CUDA graph (on cuda:",
                      capturing_device(), "); keep it out of the captured region"));
}

void capture_note_allocation(void* ptr, size_t nbytes, int device) noexcept {
  if (t_capture != nullptr && t_capture->device == device && ptr != nullptr) {
    t_capture->live.emplace(ptr, nbytes);
  }
}

bool capture_defers_free(void* ptr, size_t nbytes, int device) noexcept {
  if (t_capture == nullptr || t_capture->device != device) return false;
  if (t_capture->live.erase(ptr) > 0) return false;  // the graph's own: a free node
  t_capture->deferred.emplace_back(ptr, nbytes);
  return true;
}

bool graph_memory_orphaned(void* ptr) noexcept {
  if (!g_has_orphans.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::mutex> lock(g_orphans_mu);
  return g_orphans.erase(ptr) > 0;
}

void* capture_graph(int device, const std::function<void()>& fn) {
  GRADUS_CHECK(t_capture == nullptr, GraphCaptureError,
               "cuda::Graph::capture: this thread is already capturing a graph (on cuda:",
               t_capture == nullptr ? -1 : t_capture->device, "); captures do not nest");
  DeviceState& s = device_state(device);
  std::unique_lock<std::mutex> one_at_a_time(s.capture_mu, std::try_to_lock);
  GRADUS_CHECK(one_at_a_time.owns_lock(), GraphCaptureError,
               "cuda::Graph::capture: another thread is capturing a graph on cuda:", device,
               " (one capture per device at a time)");
  DeviceGuard guard(device);
  const cudaStream_t origin = stream_of(device);
  if (s.capture_stream == nullptr) {
    GRADUS_CUDA_CHECK("cuda::Graph::capture",
                      cudaStreamCreateWithFlags(&s.capture_stream, cudaStreamNonBlocking));
  }
  const cudaStream_t stream = s.capture_stream;
  // The captured work comes after what this thread queued so far (a replay is ordered by the
  // stream it is launched on; this only orders the capture's own setup).
  cudaEvent_t queued = nullptr;
  GRADUS_CUDA_CHECK("cuda::Graph::capture",
                    cudaEventCreateWithFlags(&queued, cudaEventDisableTiming));
  GRADUS_CUDA_CHECK("cuda::Graph::capture", cudaEventRecord(queued, origin));
  GRADUS_CUDA_CHECK("cuda::Graph::capture", cudaStreamWaitEvent(stream, queued, 0));
  cudaEventDestroy(queued);

  set_thread_stream(device, stream);
  // cuBLASLt's workspace is per stream and kept: allocate the capture stream's now, or it would
  // be graph memory that outlives the capture. The libraries' handles likewise: creating one
  // allocates device memory, which a capture refuses (cudnnCreate fails with
  // CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED), so a region whose first convolution
  // or GEMM is inside the capture finds one waiting in the device's free list.
  try {
    gemm_workspace(device);
    lt_handle(device);
    { const BlasLease blas(device); }
#if GRADUS_HAS_CUDNN
    { const CudnnLease cudnn(device); }
#endif
  } catch (...) {
    set_thread_stream(device, origin);  // the thread keeps the stream it had
    throw;
  }
  Capture capture;
  capture.device = device;
  cudaError_t begun = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (begun != cudaSuccess) {
    cudaGetLastError();
    set_thread_stream(device, origin);
    GRADUS_CUDA_CHECK("cuda::Graph::capture", begun);
  }
  t_capture = &capture;
  std::exception_ptr failure;
  try {
    fn();
  } catch (...) {
    failure = std::current_exception();
  }
  t_capture = nullptr;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (ended != cudaSuccess) cudaGetLastError();
  set_thread_stream(device, origin);

  // A graph that will never run needs none of the blocks freed during its capture.
  auto discard = [&] {
    if (graph != nullptr) cudaGraphDestroy(graph);
    orphan(capture.live);
    for (const auto& [ptr, nbytes] : capture.deferred) pool_free(ptr, nbytes, device, origin);
  };
  if (failure) {
    discard();
    try {
      std::rethrow_exception(failure);
    } catch (const GraphCaptureError&) {
      throw;
    } catch (const std::exception& e) {
      throw GraphCaptureError(
          detail::str_cat("cuda::Graph::capture: the captured region failed: ", e.what()));
    }
  }
  if (ended != cudaSuccess) {
    discard();
    throw GraphCaptureError(detail::str_cat(
        "cuda::Graph::capture: the capture on cuda:", device, " was invalidated (",
        cudaGetErrorString(ended),
        "): the region did something a graph cannot hold, such as a host wait, a synchronous "
        "copy, or joining a stream the capture does not own"));
  }
  if (!capture.live.empty()) {
    const size_t n = capture.live.size();
    const size_t bytes = total_bytes(capture.live);
    discard();
    throw GraphCaptureError(detail::str_cat(
        "cuda::Graph::capture: ", n, " block(s) of memory (", bytes,
        " bytes) allocated inside the captured region are still in use after it: tensors created "
        "there escaped it (a result kept, a gradient created by the first backward). Run the "
        "region once before capturing (warm-up), and copy_ results into tensors made before the "
        "capture; the escaped tensors are unusable"));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    for (const auto& [ptr, nbytes] : capture.deferred) pool_free(ptr, nbytes, device, origin);
    GRADUS_CUDA_CHECK("cuda::Graph::capture (instantiate)", made);
  }
  return new CapturedGraph{exec, std::move(capture.deferred)};
}

void replay_graph(int device, void* exec) {
  refuse_in_capture("replaying a graph");
  DeviceGuard guard(device);
  GRADUS_CUDA_CHECK("cuda::Graph::replay",
                    cudaGraphLaunch(static_cast<CapturedGraph*>(exec)->exec, stream_of(device)));
}

void destroy_graph(int device, void* exec) noexcept {
  std::unique_ptr<CapturedGraph> captured(static_cast<CapturedGraph*>(exec));
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    return;  // the runtime is shutting down
  }
  if (current != device) cudaSetDevice(device);
  // The graph's memory is freed inside it; destroying the graph returns it to the driver once its
  // last launch has finished. The blocks it kept follow its launches on this thread's stream.
  if (cudaGraphExecDestroy(captured->exec) != cudaSuccess) cudaGetLastError();
  for (const auto& [ptr, nbytes] : captured->kept)
    pool_free(ptr, nbytes, device, stream_of(device));
  if (current != device) cudaSetDevice(current);
}

}  // namespace gradus::backend::cuda
