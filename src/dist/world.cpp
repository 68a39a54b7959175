// dist::init / finalize and the world's default group: CPU tensors through the MPI engine, CUDA
// tensors through NCCL (nccl_group.cpp), a world of one without either.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "dist/group_impl.h"
#include "dist/mpi_engine.h"
#include "gradus/core/cuda.h"

namespace gradus::dist {

namespace {

struct State {
  std::mutex mutex;
  bool initialized = false;
  bool finalized = false;
  World world;
  InitOptions options;
  std::unique_ptr<detail::MpiEngine> engine;
  std::shared_ptr<ProcessGroup> group;
};

State& state() {
  static State* s = new State();  // never destroyed: finalize() may run from atexit
  return *s;
}

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// Which launcher started this process (MPI is initialised only under one).
std::string detect_launcher() {
  if (env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMI_SIZE") || env_set("MPI_LOCALNRANKS")) {
    return "mpirun";
  }
  // srun --mpi=pmix sets these next to SLURM_PROCID (Debian's OpenMPI has no PMI-2 support, so
  // --mpi=pmi2 does not join the ranks there); a plain sbatch shell has only the
  // SLURM_ variables and is one process.
  if (env_set("SLURM_PROCID") && (env_set("PMIX_RANK") || env_set("PMI_RANK"))) return "srun";
  if (env_set("PMIX_RANK")) return "mpirun";
  return "none";
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : 0;
}

void check_mpi(int rc, const char* call) {
  if (rc != MPI_SUCCESS) {
    throw DistError(std::string("dist::init: ") + call +
                    " failed: " + detail::mpi_error_string(rc));
  }
}

// Open MPI's non-blocking collectives (libnbc) pick a binomial tree for every in-place
// MPI_Iallreduce on fewer than 4 ranks: reduce to rank 0, then broadcast, so rank 0's link
// carries the whole buffer twice and one rank reduces alone. Gradient all-reduces are in place
// and large, so gradus asks for the ring (each rank sends and reduces 1/size of the buffer per
// round; the bandwidth-optimal algorithm NCCL also uses): on two ranks of one host it all-reduces
// mlp-large's 7.4 MB of gradients in 2.3 ms instead of 4.4-6.8 ms (docs/performance.md). A value
// the user set (environment or mpirun --mca) wins: setenv does not overwrite.
void prefer_ring_all_reduce() {
  ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
}

}  // namespace

detail::MpiEngine& detail::mpi_engine() {
  State& s = state();
  GRADUS_CHECK(s.engine && !s.finalized, DistError,
               "dist: a collective was issued after dist::finalize() (or without MPI)");
  return *s.engine;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

LaunchEnvironment launch_environment() {
  LaunchEnvironment e;
  const int mpi = std::max(env_int("OMPI_COMM_WORLD_SIZE"), env_int("PMI_SIZE"));
  // srun sets the step's task count for every process of the step (a batch script's own shell
  // is no step of several tasks).
  const int srun = env_int("SLURM_STEP_NUM_TASKS");
  e.processes = std::max({1, mpi, srun});
  e.srun_without_pmi = srun > 1 && mpi == 0 && !env_set("PMIX_RANK") && !env_set("PMI_RANK");
  return e;
}

const World& init(const InitOptions& options) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.initialized) return s.world;
  GRADUS_CHECK(!s.finalized, DistError, "dist::init: called after dist::finalize()");
  GRADUS_CHECK(options.timeout_seconds > 0 && std::isfinite(options.timeout_seconds), ValueError,
               "dist::init: timeout_seconds must be a positive number of seconds (got ",
               options.timeout_seconds, ")");
  s.options = options;
  s.world.launcher = detect_launcher();
  if (s.world.uses_mpi()) {
    prefer_ring_all_reduce();
    // The start-up watchdog: MPI_Init blocks until every rank has called it, with no timeout of
    // its own. Disarmed once the first collective over the world (the split below) returns.
    const double startup = options.startup_timeout_seconds > 0 ? options.startup_timeout_seconds
                                                               : 2 * options.timeout_seconds;
    auto started = std::make_shared<std::atomic<bool>>(false);
    std::thread([started, startup] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(startup);
      while (std::chrono::steady_clock::now() < until) {
        if (started->load()) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (started->load()) return;
      const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
      if (rank == nullptr) rank = std::getenv("PMIX_RANK");
      std::fprintf(stderr,
                   "gradus: error on rank %s: dist::init: the ranks did not all start within %g s "
                   "(MPI_Init and the first exchange): a rank did not start, exited, or is stuck "
                   "before it. Ending this process so that the launcher ends the job (raise "
                   "--dist-timeout if start-up is that slow)\n",
                   rank != nullptr ? rank : "?", startup);
      std::fflush(stderr);
      std::_Exit(1);
    }).detach();
    int provided = 0;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
              "MPI_Init_thread");
    GRADUS_CHECK(provided >= MPI_THREAD_SERIALIZED, DistError,
                 "dist::init: this MPI library does not support MPI_THREAD_SERIALIZED (gradus "
                 "runs every MPI call on one communication thread)");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &s.world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &s.world.size);
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s.world.rank, MPI_INFO_NULL,
                                  &node),
              "MPI_Comm_split_type");
    started->store(true);  // every rank has joined
    MPI_Comm_rank(node, &s.world.local_rank);
    MPI_Comm_size(node, &s.world.local_size);
    MPI_Comm_free(&node);
    s.engine = std::make_unique<detail::MpiEngine>(s.world.rank, s.world.size, options);
  }
  // Each rank of a host takes its own GPU; Device::best() then names it.
  if (cuda::device_count() > 0) cuda::set_device(s.world.local_rank % cuda::device_count());
  s.group = detail::make_world_group(s.world, options);
  s.initialized = true;
  std::atexit([] { finalize(); });
  return s.world;
}

bool is_initialized() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.initialized;
}

const World& world() {
  return state().world;
}

std::shared_ptr<ProcessGroup> default_group() {
  if (!is_initialized()) init();
  return state().group;
}

void finalize() {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.initialized || s.finalized) return;
  s.finalized = true;
  s.group.reset();  // frees the NCCL communicator, if any
  if (!s.engine) return;
  const bool clean = s.engine->shutdown();
  if (!clean) {
    // A peer is gone or stuck: MPI_Finalize would wait for it forever.
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  s.engine.reset();
  detail::free_mpi_types();
  MPI_Finalize();
}

void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (world().uses_mpi()) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  }
  std::_Exit(exit_code);
}

std::string mpi_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string v(text, static_cast<size_t>(len));
  const size_t comma = v.find(',');
  return comma == std::string::npos ? v : v.substr(0, comma);
}

}  // namespace gradus::dist
