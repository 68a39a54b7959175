// The distributed world and its collectives.
//
//   const dist::World& w = dist::init();        // under mpirun / srun: MPI; else a world of one
//   auto pg = dist::default_group();
//   pg->all_reduce(grad, dist::ReduceOp::avg)->wait();
//
// Engines, never a home-made transport: CPU tensors travel with MPI (OpenMPI), CUDA tensors with
// NCCL, whose unique id is broadcast over MPI. A world of one (no launcher) needs neither.
//
// Asynchrony. Every collective returns a Work handle at once. On the CPU one communication
// thread per process owns every MPI call: it starts the non-blocking MPI operation (MPI_Iallreduce
// ...) in the order the collectives were issued, and keeps it progressing (MPI_Test) while the
// caller computes, so communication overlaps with compute. On the GPU the NCCL call is enqueued on
// the group's communication stream after an event recorded on the caller's current stream, so
// it sees what the compute stream produced without the host waiting; wait() watches the
// completion event from the host (the timeout and NCCL's asynchronous errors need a watchdog),
// then orders the current stream after it.
//
// Order. Like every MPI/NCCL program, all ranks of a group must issue the same collectives in the
// same order; issuing them from several threads at once is undefined.
//
// Timeouts and faults. A collective that has not completed within `timeout` fails: wait() throws
// DistError naming the collective, the tensor, this rank and the rank that stopped answering. The
// communication thread exchanges small heartbeats with every peer (once a second on a separate
// communicator), so a rank that died or was stopped (SIGSTOP, which MPI itself never reports) is
// named, and a rank that is alive but behind is told apart from it. After such an error the
// process cannot leave MPI cleanly: finalize() (run at exit) then aborts the whole job
// (MPI_Abort), so no rank hangs.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gradus/core/error.h"
#include "gradus/core/tensor.h"

namespace gradus::dist {

// A collective failed or timed out, or the world is unusable.
class DistError : public Error {
 public:
  using Error::Error;
};

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

// Who this process is. Read once by init().
struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // among the ranks on this host (picks the GPU)
  int local_size = 1;
  std::string launcher = "none";  // "mpirun", "srun" or "none" (a world of one)
  bool uses_mpi() const { return launcher != "none"; }
};

struct InitOptions {
  // Every blocking wait on a collective gives up after this long (gradus train --dist-timeout).
  double timeout_seconds = 60.0;
  // A peer not heard from for this long is reported as not answering (0: min(5 s, timeout/2)).
  double heartbeat_silence_seconds = 0.0;
  // Start-up (MPI_Init and the first exchange of every rank) must end within this long, or this
  // process exits naming the cause and the launcher ends the job: a rank that never starts would
  // otherwise keep the others in MPI_Init forever. 0: twice timeout_seconds.
  double startup_timeout_seconds = 0.0;
};

// What the launcher's environment says, read without initialising MPI: how many processes it
// started (OMPI_COMM_WORLD_SIZE / PMI_SIZE under mpirun, SLURM_STEP_NUM_TASKS under srun; 1
// without a launcher) and whether srun started them without a PMI that would join them into one
// world (srun without --mpi=pmix: each process would be a world of one).
struct LaunchEnvironment {
  int processes = 1;
  bool srun_without_pmi = false;
};
LaunchEnvironment launch_environment();

// Reads the world from the launcher's environment (OpenMPI's mpirun/mpiexec, Slurm's srun with
// PMI/PMIx) and initialises MPI; without a launcher, a world of one with no MPI at all. Calling it
// again returns the same world. With a CUDA build and a GPU, each rank's default CUDA device
// becomes local_rank % device_count. Throws DistError when MPI fails to start.
const World& init(const InitOptions& options = {});
bool is_initialized();
// The world (a world of one before init()).
const World& world();
inline int rank() {
  return world().rank;
}
inline int world_size() {
  return world().size;
}
// Leaves MPI cleanly (registered with atexit by init(); calling it earlier is allowed). After a
// failed or timed-out collective it calls MPI_Abort instead, which ends every rank of the job.
void finalize();
// Ends the whole job at once (every rank) with this exit code: MPI_Abort under a launcher,
// std::_Exit in a world of one.
[[noreturn]] void abort_job(int exit_code);
// "Open MPI v4.1.4, ..." / "NCCL 2.27.3"; "not built" or "unavailable" when absent.
std::string mpi_version();
std::string nccl_version();

// The handle of one collective.
class Work {
 public:
  virtual ~Work() = default;
  // True once the operation finished (successfully or not). Never blocks.
  virtual bool is_completed() = 0;
  // Blocks until the operation finished; throws DistError if it failed or timed out. For CUDA
  // tensors it returns once the current stream is ordered after the communication.
  virtual void wait() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// Bytes this process moved through a group (payload only, per direction).
struct CommStats {
  uint64_t collectives = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }  // within this group
  int size() const { return size_; }
  // The world rank of each member, in group-rank order (0..size-1 for the world's group).
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  std::chrono::duration<double> timeout() const { return timeout_; }

  // Tensors: contiguous, of a floating dtype (f32, f64, f16, bf16) or i32/i64, on the CPU (MPI)
  // or a CUDA device (NCCL); every rank passes the same shape and dtype. Operations are in place
  // unless an output is given. `label` names the tensor in error messages.

  // t = op over the ranks' t. avg divides the sum by size() (integer tensors: sum/max/min only).
  virtual WorkPtr all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum,
                             const std::string& label = "") = 0;
  // Every rank's t = root's t.
  virtual WorkPtr broadcast(const Tensor& t, int root, const std::string& label = "") = 0;
  // On root, t = op over the ranks' t; elsewhere t is left unchanged.
  virtual WorkPtr reduce(const Tensor& t, int root, ReduceOp op = ReduceOp::sum,
                         const std::string& label = "") = 0;
  // input holds size() equal chunks (numel divisible by size()); output (numel = chunk) gets this
  // rank's chunk reduced over the ranks.
  virtual WorkPtr reduce_scatter(const Tensor& output, const Tensor& input,
                                 ReduceOp op = ReduceOp::sum, const std::string& label = "") = 0;
  // output (numel = size() * input numel) gets every rank's input, in rank order. input may be
  // the view of output's own chunk (in place).
  virtual WorkPtr all_gather(const Tensor& output, const Tensor& input,
                             const std::string& label = "") = 0;
  // Point to point; the receiver's tensor has the sender's shape and dtype. tag >= 0.
  virtual WorkPtr send(const Tensor& t, int dst, int tag = 0, const std::string& label = "") = 0;
  virtual WorkPtr recv(const Tensor& t, int src, int tag = 0, const std::string& label = "") = 0;
  virtual WorkPtr barrier() = 0;

  virtual CommStats stats() const = 0;

 protected:
  ProcessGroup(int rank, int size, std::chrono::duration<double> timeout,
               std::vector<int> world_ranks)
      : rank_(rank), size_(size), timeout_(timeout), world_ranks_(std::move(world_ranks)) {}
  int rank_;
  int size_;
  std::chrono::duration<double> timeout_;
  std::vector<int> world_ranks_;
};

// The group of every rank (after init(); init() is called with default options if needed).
std::shared_ptr<ProcessGroup> default_group();

// Sub-groups (for 2-D layouts: data-parallel x pipeline or x tensor parallel). Both are
// collective over the world: every rank calls them, in the same order relative to its other
// collectives, and they fail with DistError (never hang) when ranks disagree or one is missing.
//
// split_group: the ranks passing the same color form one group, ordered by (key, world rank);
// key < 0 means the world rank. A negative color (kNoGroup) joins no group and gets nullptr.
// One call creates every group of a layout axis (as MPI_Comm_split does).
inline constexpr int kNoGroup = -1;
std::shared_ptr<ProcessGroup> split_group(int color, int key = -1);
// new_group: one group of the given world ranks (distinct, in group-rank order), the same list
// on every rank; ranks outside it get nullptr.
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

// Blocks until every work in `works` completed; rethrows the first failure.
void wait_all(const std::vector<WorkPtr>& works);

}  // namespace gradus::dist
