// The MPI engine behind every CPU collective: one communication thread that owns all MPI calls
// after MPI_Init (so MPI_THREAD_SERIALIZED suffices), starts the non-blocking operations in issue
// order, progresses them with MPI_Test while the callers compute, exchanges heartbeats with the
// peers and fails operations that outlive the timeout with a diagnosis. Internal to gradus::dist.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gradus/dist/process_group.h"

namespace gradus::dist::detail {

using Clock = std::chrono::steady_clock;

enum class OpKind {
  all_reduce,
  broadcast,
  reduce,
  reduce_scatter,
  all_gather,
  send,
  recv,
  barrier,
  split  // MPI_Comm_split of `comm`: color in `tag`, key in `peer`; the result in `new_comm`
};
const char* op_kind_name(OpKind kind);

class MpiEngine;

// One collective or point-to-point operation, from issue to completion.
class MpiWork final : public Work {
 public:
  bool is_completed() override;
  void wait() override;

  // Set by the issuer, read by the communication thread.
  OpKind kind = OpKind::barrier;
  Tensor tensor;  // the buffer (input/output of in-place ops; the output otherwise)
  Tensor input;   // reduce_scatter / all_gather input
  int peer = 0;   // root, destination or source
  int tag = 0;
  ReduceOp op = ReduceOp::sum;
  std::string label;
  MPI_Comm comm = MPI_COMM_NULL;
  int comm_rank = 0;
  int comm_size = 1;
  uint64_t seq = 0;  // issue order within the engine (heartbeats report it)
  Clock::time_point issued;
  std::chrono::duration<double> timeout{60.0};
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Comm new_comm = MPI_COMM_NULL;  // split's result
  // World rank of each member of `comm` (empty: comm is the world). Error messages and the
  // diagnosis of a timeout name world ranks.
  std::vector<int> world_ranks;

  std::string describe() const;  // "all_reduce of 'bucket 0' (f32 [1024], 4.0 KiB)"
  void finish(std::string error);

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string error_;
};

class MpiEngine {
 public:
  // Starts the thread. MPI must be initialised; world is MPI_COMM_WORLD's rank/size.
  MpiEngine(int rank, int size, InitOptions options);
  ~MpiEngine();
  MpiEngine(const MpiEngine&) = delete;
  MpiEngine& operator=(const MpiEngine&) = delete;

  // Queues the operation (validated by the caller) and returns at once.
  void submit(const std::shared_ptr<MpiWork>& work);
  // Waits for the operations in flight, says goodbye to every peer (so no heartbeat is left in
  // flight) and stops the thread. Returns false when that did not complete within the timeout
  // (then the process must abort instead of calling MPI_Finalize).
  bool shutdown();
  // True after an operation failed or timed out: MPI cannot be left cleanly any more.
  bool broken() const;

 private:
  struct Peer {
    int64_t recv_buffer[3] = {0, 0, 0};  // {ops issued, ops completed, goodbye}
    int64_t send_buffer[3] = {0, 0, 0};
    MPI_Request recv_request = MPI_REQUEST_NULL;
    MPI_Request send_request = MPI_REQUEST_NULL;
    Clock::time_point last_heard;
    int64_t issued = 0;
    int64_t completed = 0;
    bool said_goodbye = false;
  };

  void run();
  void start(const std::shared_ptr<MpiWork>& work);
  void complete(MpiWork& work);
  void heartbeat(Clock::time_point now, bool goodbye);
  void poll_heartbeats(Clock::time_point now);
  std::string diagnose(const MpiWork& work, Clock::time_point now) const;
  void fail_everything(const std::string& why);
  bool goodbye_done();

  const int rank_;
  const int size_;
  const InitOptions options_;
  const std::chrono::duration<double> silence_;
  MPI_Comm heartbeat_comm_ = MPI_COMM_NULL;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<MpiWork>> queue_;  // issued, not yet started
  bool stopping_ = false;
  bool stopped_cleanly_ = false;
  bool thread_done_ = false;
  bool broken_ = false;
  std::condition_variable thread_done_cv_;

  // Owned by the communication thread.
  std::vector<std::shared_ptr<MpiWork>> in_flight_;
  std::vector<Peer> peers_;
  Clock::time_point last_heartbeat_;
  std::atomic<int64_t> issued_{0};  // written under mutex_, read by the thread's heartbeats
  int64_t completed_ = 0;

  std::thread thread_;
};

// The MPI datatype of a gradus dtype, and the reduction (built-in, or a user-defined op for the
// 16-bit floats, which MPI does not know).
MPI_Datatype mpi_datatype(DType dtype);
MPI_Op mpi_op(ReduceOp op, DType dtype);
void create_mpi_types();
void free_mpi_types();
std::string mpi_error_string(int code);

}  // namespace gradus::dist::detail
