// Device time for the profiler: each scope records a CUDA event on the current stream when it
// opens and when it closes, and the session reads them all back at its end (one wait, not one per
// op). The time between a scope's two events is what its kernels took on the stream, plus any gap
// in which the GPU waited for the host to launch them.
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "backend/cuda/runtime.h"
#include "gradus/core/cuda.h"
#include "gradus/core/profiling.h"

namespace gradus::backend {
namespace {

class CudaTimer final : public profiling::DeviceTimer {
 public:
  bool begin_session() override {
    std::lock_guard<std::mutex> lock(mu_);
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();  // clear the sticky "no device" error
      return false;
    }
    if (cudaGetDevice(&device_) != cudaSuccess) return false;
    if (base_ == nullptr && cudaEventCreate(&base_) != cudaSuccess) return false;
    // Idle device, then the reference mark: the caller takes the host clock right after, so
    // device times line up with the host's to within the synchronisation's latency.
    cuda::count_host_sync();
    if (cudaDeviceSynchronize() != cudaSuccess) return false;
    if (cudaEventRecord(base_, stream()) != cudaSuccess) return false;
    cuda::count_host_sync();
    if (cudaEventSynchronize(base_) != cudaSuccess) return false;
    marks_.clear();
    open_ = true;
    return true;
  }

  int32_t mark() noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return -1;
    int device = -1;
    // Only the session's device: events of two devices cannot be compared.
    if (cudaGetDevice(&device) != cudaSuccess || device != device_) return -1;
    cudaEvent_t ev = nullptr;
    if (!free_.empty()) {
      ev = free_.back();
      free_.pop_back();
    } else if (cudaEventCreate(&ev) != cudaSuccess) {
      return -1;
    }
    cudaStream_t s = stream();
    if (cudaEventRecord(ev, s) != cudaSuccess) {
      free_.push_back(ev);
      return -1;
    }
    marks_.push_back({ev, s});
    return static_cast<int32_t>(marks_.size() - 1);
  }

  std::vector<Mark> end_session() override {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
    std::vector<Mark> out(marks_.size());
    for (size_t i = 0; i < marks_.size(); ++i) {
      float ms = 0;
      cuda::count_host_sync();
      if (cudaEventSynchronize(marks_[i].event) == cudaSuccess &&
          cudaEventElapsedTime(&ms, base_, marks_[i].event) == cudaSuccess) {
        out[i].ns = static_cast<int64_t>(static_cast<double>(ms) * 1e6);
        out[i].stream = reinterpret_cast<uint64_t>(marks_[i].stream);
      }
      free_.push_back(marks_[i].event);  // reused by the next session
    }
    marks_.clear();
    cudaGetLastError();
    return out;
  }

 private:
  cudaStream_t stream() noexcept {
    try {
      return static_cast<cudaStream_t>(gradus::cuda::current_stream(device_));
    } catch (...) {
      return nullptr;
    }
  }

  struct Pending {
    cudaEvent_t event;
    cudaStream_t stream;
  };
  std::mutex mu_;
  bool open_ = false;
  int device_ = 0;
  cudaEvent_t base_ = nullptr;
  std::vector<Pending> marks_;
  std::vector<cudaEvent_t> free_;
};

}  // namespace

profiling::DeviceTimer* cuda_device_timer() {
  static CudaTimer* timer = new CudaTimer;  // never destroyed: events outlive static teardown
  return timer;
}

}  // namespace gradus::backend
