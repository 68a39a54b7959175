// Index checks that run on the device, and the host's waits on the device where their findings
// are raised. A range check that read the indices back would stall the host every step (and
// make a CUDA graph of the step impossible); instead a kernel records the first bad value in
// mapped host memory, and the next wait (a loss read at a logging interval, a synchronize, an
// event) raises the IndexError. GRADUS_CUDA_SYNC_CHECKS=1 waits after each check instead, so the
// error comes from the op that had the bad index (for debugging).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "backend/common/index_check.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/runtime.h"

namespace gradus::backend::cuda {
namespace {

std::atomic<uint64_t> g_host_syncs{0};

// Every check site (op, operand, size, allowed value) has a number that the kernels record.
// Sites repeat step after step (one per op and shape), so the table stays small.
class Sites {
 public:
  int intern(const IndexCheck& c) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < list_.size(); ++i) {
      const IndexCheck& s = list_[i];
      if (s.size == c.size && s.allowed == c.allowed && std::strcmp(s.op, c.op) == 0 &&
          std::strcmp(s.what, c.what) == 0) {
        return static_cast<int>(i);
      }
    }
    list_.push_back(c);
    return static_cast<int>(list_.size() - 1);
  }
  IndexCheck at(int i) {
    std::lock_guard<std::mutex> lock(mu_);
    return i >= 0 && static_cast<size_t>(i) < list_.size()
               ? list_[static_cast<size_t>(i)]
               : IndexCheck{
                     .op = "an index check", .what = "index", .size = 0, .allowed = std::nullopt};
  }

 private:
  std::mutex mu_;
  std::vector<IndexCheck> list_;
};

Sites& sites() {
  static Sites s;
  return s;
}

bool check_at_once() {
  static const bool at_once = [] {
    const char* env = std::getenv("GRADUS_CUDA_SYNC_CHECKS");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  return at_once;
}

void raise_one(const DeviceState& s) {
  volatile DeviceIndexError* e = s.index_error;
  if (e == nullptr || e->flag == 0) return;
  const int site = e->site;
  const int64_t value = e->value;
  // Reported once: clear the record, and the claim so that a later bad index reports again
  // (ordered on the compute stream, before any check queued from now on).
  e->flag = 0;
  {
    DeviceGuard guard(s.index);
    GRADUS_CUDA_CHECK("index check",
                      cudaMemsetAsync(s.index_error_claim, 0, sizeof(int), s.default_stream));
  }
  throw IndexError(detail::str_cat(
      index_error_message(sites().at(site), value), " (found on cuda:", s.index,
      " by a check the host did not wait for; it is raised at the next wait on the device, here. "
      "GRADUS_CUDA_SYNC_CHECKS=1 raises it at the op instead)"));
}

}  // namespace

// No host code runs while a graph replays, so a value read back during a capture would be the
// one of the capture (and the wait itself invalidates it).
void refuse_host_wait(const char* op) {
  refuse_in_capture(op,
                    " waits for the GPU (a value read back to the host, such as item(), or a "
                    "synchronize), which");
}

void count_host_sync() noexcept {
  g_host_syncs.fetch_add(1, std::memory_order_relaxed);
}

uint64_t host_syncs() noexcept {
  return g_host_syncs.load(std::memory_order_relaxed);
}

void raise_device_errors(int device) {
  if (device >= 0) {
    if (DeviceState* s = ready_state(device)) raise_one(*s);
    return;
  }
  for (int d = 0; d < device_count(); ++d) {
    if (DeviceState* s = ready_state(d)) raise_one(*s);
  }
}

void wait_stream(cudaStream_t stream, int device, const char* op) {
  refuse_host_wait(op);
  count_host_sync();
  GRADUS_CUDA_CHECK(op, cudaStreamSynchronize(stream));
  raise_device_errors(device);
}

void wait_device(int device, const char* op) {
  refuse_host_wait(op);
  count_host_sync();
  GRADUS_CUDA_CHECK(op, cudaDeviceSynchronize());
  raise_device_errors(device);
}

void wait_event(cudaEvent_t event, const char* op) {
  refuse_host_wait(op);
  count_host_sync();
  GRADUS_CUDA_CHECK(op, cudaEventSynchronize(event));
  // No index errors raised here: events also order internal work (the loader's host buffers,
  // destructors that must not throw), and the error keeps until a read or synchronize().
}

void CudaBackend::check_index_range(const Tensor& index, const IndexCheck& check) {
  const int64_t n = index.numel();
  if (n == 0) return;
  const int device = index.device().index();
  DeviceGuard guard(device);
  DeviceState& s = device_state(device);
  cudaStream_t stream = stream_of(device);
  launch_check_index_range(static_cast<const int64_t*>(index.raw_data()), n, check.size,
                           check.allowed.has_value(), check.allowed.value_or(0),
                           sites().intern(check), s.index_error_claim, s.index_error_on_device,
                           stream);
  if (check_at_once()) wait_stream(stream, device, check.op);
}

}  // namespace gradus::backend::cuda
