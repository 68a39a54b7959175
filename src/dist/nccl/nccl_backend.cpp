// Collectives on CUDA tensors with NCCL. Each call is enqueued on the group's communication stream
// after an event recorded on the caller's current (compute) stream, so the communication sees the
// values the compute stream produced without the host waiting; Work::wait() makes the current
// stream wait for the communication's completion event. The Work keeps the tensors alive until
// then, so their blocks cannot go back to the stream-ordered pool while NCCL still uses them.
//
// Built as the run-time module libgradus_dist_nccl.so (src/dist/nccl_module.cpp loads it), so that
// gradus_dist links neither NCCL nor the CUDA runtime.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "dist/group_impl.h"
#include "gradus/core/cuda.h"

namespace gradus::dist {
namespace detail {
namespace {

void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw DistError(what + ": " + cudaGetErrorString(e));
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    default:
      return ncclUint8;
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
    default:
      return ncclSum;
  }
}

class NcclWork final : public Work {
 public:
  NcclWork(std::string what, ncclComm_t comm, Tensor a, Tensor b, std::chrono::duration<double> t)
      : what_(std::move(what)), comm_(comm), a_(std::move(a)), b_(std::move(b)), timeout_(t) {
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), what_);
  }
  ~NcclWork() override { cudaEventDestroy(done_); }
  cudaEvent_t event() const { return done_; }

  // Done, not yet, or throws: a failed collective (a CUDA error on the event, or an asynchronous
  // NCCL error while it is pending) is never reported as completed.
  bool is_completed() override {
    if (done()) return true;
    throw_async_error();
    return false;
  }

  void wait() override {
    // Host-side watchdog: poll the event (NCCL ops cannot be waited on with a deadline
    // otherwise), abort the communicator on a timeout or an asynchronous NCCL error.
    const auto start = std::chrono::steady_clock::now();
    while (!done()) {
      throw_async_error();
      if (std::chrono::steady_clock::now() - start > timeout_) {
        ncclCommAbort(comm_);
        throw DistError("dist: " + what_ + " timed out after " +
                        std::to_string(static_cast<int>(timeout_.count())) +
                        " s (NCCL; a peer rank stopped or died)");
      }
      // The current stream may simply be ordered after the event instead of the host waiting;
      // DDP waits only at the end of backward, where the host has nothing else to do.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(cuda::current_stream()), done_, 0),
               "dist: " + what_);
  }

 private:
  std::string what_;
  ncclComm_t comm_;
  Tensor a_, b_;  // kept alive until the work is dropped

  // Whether the event has completed; throws the CUDA error it reports instead. cudaEventQuery's
  // "not ready" is also left as the thread's last error, and is cleared here: the next launch
  // check (cudaGetLastError) would otherwise report it as that launch's failure.
  bool done() {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    check_cuda(e, "dist: " + what_);
    return true;
  }
  void throw_async_error() {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      throw DistError("dist: " + what_ + " failed: " + ncclGetErrorString(async));
    }
  }
  std::chrono::duration<double> timeout_;
  cudaEvent_t done_ = nullptr;
};

class Nccl final : public NcclBackend {
 public:
  Nccl(ProcessGroup& bootstrap, const World& world) : rank_(world.rank), size_(world.size) {
    timeout_ = bootstrap.timeout();
    Tensor id = empty({static_cast<int64_t>(sizeof(ncclUniqueId))}, {DType::u8, Device::cpu()});
    if (rank_ == 0) {
      ncclUniqueId uid;
      check(ncclGetUniqueId(&uid), "ncclGetUniqueId");
      std::memcpy(id.raw_data(), &uid, sizeof(uid));
    }
    bootstrap.broadcast(id, 0, "NCCL unique id")->wait();
    ncclUniqueId uid;
    std::memcpy(&uid, id.raw_data(), sizeof(uid));
    device_ = cuda::current_device();
    check_cuda(cudaSetDevice(device_), "dist: cudaSetDevice");
    check(ncclCommInitRank(&comm_, size_, uid, rank_), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
               "dist: creating the communication stream");
  }
  ~Nccl() override {
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  WorkPtr all_reduce(const Tensor& t, ReduceOp op, const std::string& label) override {
    return launch("all_reduce", label, t, {}, [&] {
      return ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                           nccl_type(t.dtype()), nccl_op(op), comm_, stream_);
    });
  }
  WorkPtr broadcast(const Tensor& t, int root, const std::string& label) override {
    return launch("broadcast", label, t, {}, [&] {
      return ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                           nccl_type(t.dtype()), root, comm_, stream_);
    });
  }
  WorkPtr reduce(const Tensor& t, int root, ReduceOp op, const std::string& label) override {
    return launch("reduce", label, t, {}, [&] {
      return ncclReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                        nccl_type(t.dtype()), nccl_op(op), root, comm_, stream_);
    });
  }
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                         const std::string& label) override {
    return launch("reduce_scatter", label, output, input, [&] {
      return ncclReduceScatter(input.raw_data(), output.raw_data(),
                               static_cast<size_t>(output.numel()), nccl_type(output.dtype()),
                               nccl_op(op), comm_, stream_);
    });
  }
  WorkPtr all_gather(const Tensor& output, const Tensor& input, const std::string& label) override {
    return launch("all_gather", label, output, input, [&] {
      return ncclAllGather(input.raw_data(), output.raw_data(), static_cast<size_t>(input.numel()),
                           nccl_type(input.dtype()), comm_, stream_);
    });
  }
  WorkPtr send(const Tensor& t, int dst, const std::string& label) override {
    return launch("send", label, t, {}, [&] {
      return ncclSend(t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), dst,
                      comm_, stream_);
    });
  }
  WorkPtr recv(const Tensor& t, int src, const std::string& label) override {
    return launch("recv", label, t, {}, [&] {
      return ncclRecv(t.raw_data(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), src,
                      comm_, stream_);
    });
  }

 private:
  void check(ncclResult_t r, const char* call) const {
    if (r != ncclSuccess) {
      throw DistError(std::string("dist: ") + call + " failed on rank " + std::to_string(rank_) +
                      ": " + ncclGetErrorString(r));
    }
  }

  template <typename F>
  WorkPtr launch(const char* op, const std::string& label, const Tensor& a, const Tensor& b,
                 F&& call) {
    const std::string what = std::string(op) + (label.empty() ? "" : " of '" + label + "'") +
                             " on rank " + std::to_string(rank_) +
                             " (NCCL, cuda:" + std::to_string(a.device().index()) + ")";
    GRADUS_CHECK(a.device().index() == device_, DeviceError, "dist: ", what,
                 ": the tensor is on cuda:", a.device().index(),
                 " but this rank's NCCL "
                 "communicator is on cuda:",
                 device_);
    // The communication stream starts after what the compute stream has queued so far.
    cudaEvent_t ready = nullptr;
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "dist: " + what);
    check_cuda(cudaEventRecord(ready, static_cast<cudaStream_t>(cuda::current_stream())),
               "dist: " + what);
    check_cuda(cudaStreamWaitEvent(stream_, ready, 0), "dist: " + what);
    cudaEventDestroy(ready);  // destroyed once the wait is enqueued: allowed by CUDA
    check(call(), op);
    auto work = std::make_shared<NcclWork>(what, comm_, a, b, timeout_);
    check_cuda(cudaEventRecord(work->event(), stream_), "dist: " + what);
    return work;
  }

  int rank_, size_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::chrono::duration<double> timeout_{60.0};
};

}  // namespace

}  // namespace detail
}  // namespace gradus::dist

// The module's entry points (src/dist/nccl_module.cpp).
extern "C" gradus::dist::detail::NcclBackend* gradus_nccl_make_backend(
    gradus::dist::ProcessGroup* bootstrap, const gradus::dist::World* world) {
  return new gradus::dist::detail::Nccl(*bootstrap, *world);
}

extern "C" const char* gradus_nccl_version() {
  static const std::string version = [] {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return std::string("unavailable");
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." +
           std::to_string(v % 100);
  }();
  return version.c_str();
}
