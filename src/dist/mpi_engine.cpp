#include "dist/mpi_engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "gradus/core/profiling.h"

namespace gradus::dist::detail {

namespace {

constexpr int kHeartbeatTag = 1;
constexpr auto kHeartbeatInterval = std::chrono::milliseconds(1000);
// How long the thread sleeps between two polls while operations are in flight. Short enough not
// to add latency to a collective's rounds, long enough not to steal a core from the compute
// threads (MPI_Test of a handful of requests costs about a microsecond).
constexpr auto kPollInterval = std::chrono::microseconds(20);

// Threads blocked in MpiWork::wait(), and when the latest wait began. While one waits, nothing
// on this process computes, so the communication thread polls without sleeping for a while:
// every round of a collective (a ring all-reduce has 2 (size-1) of them) then starts as soon as
// the previous one landed, not a timer slack later. A wait that lasts longer is waiting for a
// slower rank: the thread goes back to sleeping between polls, so that a waiting rank does not
// take a core from the rank it waits for (ranks often share cores: CI, --oversubscribe).
constexpr auto kSpinAfterWait = std::chrono::milliseconds(5);
std::atomic<int> g_waiters{0};
std::atomic<Clock::rep> g_last_wait_start{0};

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3) {
    bytes /= 1024;
    ++u;
  }
  std::ostringstream os;
  os.precision(u == 0 ? 0 : 1);
  os << std::fixed << bytes << ' ' << units[u];
  return os.str();
}

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Scales n values in place (avg = sum / size), in the comm thread: no op dispatch, no OpenMP.
void scale_in_place(const Tensor& t, double factor) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::f32: {
      float* p = static_cast<float*>(t.raw_data());
      const float f = static_cast<float>(factor);
      for (int64_t i = 0; i < n; ++i) p[i] *= f;
      break;
    }
    case DType::f64: {
      double* p = static_cast<double*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) p[i] *= factor;
      break;
    }
    case DType::f16: {
      uint16_t* p = static_cast<uint16_t*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) {
        p[i] = float_to_half(half_to_float(p[i]) * static_cast<float>(factor));
      }
      break;
    }
    case DType::bf16: {
      BFloat16* p = static_cast<BFloat16*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) {
        p[i] = BFloat16(static_cast<float>(p[i]) * static_cast<float>(factor));
      }
      break;
    }
    default:
      break;  // rejected at issue time
  }
}

// ---- 16-bit float reductions (MPI has no half types) ----
MPI_Datatype g_half_type = MPI_DATATYPE_NULL;
MPI_Datatype g_bf16_type = MPI_DATATYPE_NULL;
MPI_Op g_half_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, max, min
MPI_Op g_bf16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};

template <int Kind>
float combine(float a, float b) {
  if constexpr (Kind == 0) return a + b;
  if constexpr (Kind == 1) return std::isnan(a) || a > b ? a : b;  // NaN propagates, like max
  return std::isnan(a) || a < b ? a : b;
}

template <int Kind>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = float_to_half(combine<Kind>(half_to_float(a[i]), half_to_float(b[i])));
  }
}

template <int Kind>
void bf16_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const BFloat16* a = static_cast<const BFloat16*>(in);
  BFloat16* b = static_cast<BFloat16*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = BFloat16(combine<Kind>(static_cast<float>(a[i]), static_cast<float>(b[i])));
  }
}

int op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
      return 1;
    case ReduceOp::min:
      return 2;
    default:
      return 0;  // sum, avg (sum then divide)
  }
}

}  // namespace

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::all_reduce:
      return "all_reduce";
    case OpKind::broadcast:
      return "broadcast";
    case OpKind::reduce:
      return "reduce";
    case OpKind::reduce_scatter:
      return "reduce_scatter";
    case OpKind::all_gather:
      return "all_gather";
    case OpKind::send:
      return "send";
    case OpKind::recv:
      return "recv";
    case OpKind::barrier:
      return "barrier";
    case OpKind::split:
      return "split_group";
  }
  return "?";
}

void create_mpi_types() {
  if (g_half_type != MPI_DATATYPE_NULL) return;
  MPI_Type_contiguous(2, MPI_BYTE, &g_half_type);
  MPI_Type_commit(&g_half_type);
  MPI_Type_contiguous(2, MPI_BYTE, &g_bf16_type);
  MPI_Type_commit(&g_bf16_type);
  MPI_Op_create(&half_op<0>, 1, &g_half_ops[0]);
  MPI_Op_create(&half_op<1>, 1, &g_half_ops[1]);
  MPI_Op_create(&half_op<2>, 1, &g_half_ops[2]);
  MPI_Op_create(&bf16_op<0>, 1, &g_bf16_ops[0]);
  MPI_Op_create(&bf16_op<1>, 1, &g_bf16_ops[1]);
  MPI_Op_create(&bf16_op<2>, 1, &g_bf16_ops[2]);
}

void free_mpi_types() {
  if (g_half_type == MPI_DATATYPE_NULL) return;
  for (MPI_Op* ops : {g_half_ops, g_bf16_ops}) {
    for (int i = 0; i < 3; ++i) MPI_Op_free(&ops[i]);
  }
  MPI_Type_free(&g_half_type);
  MPI_Type_free(&g_bf16_type);
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::f16:
      return g_half_type;
    case DType::bf16:
      return g_bf16_type;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
    case DType::boolean:
      return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  if (dtype == DType::f16) return g_half_ops[op_index(op)];
  if (dtype == DType::bf16) return g_bf16_ops[op_index(op)];
  switch (op) {
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
    default:
      return MPI_SUM;
  }
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

// ------------------------------------------------------------------------------------ MpiWork

std::string MpiWork::describe() const {
  std::ostringstream os;
  // Peers are group ranks on the wire; messages name world ranks.
  const int peer_world =
      world_ranks.empty() ? peer : world_ranks[static_cast<size_t>(std::max(peer, 0))];
  os << op_kind_name(kind);
  if (kind == OpKind::send) os << " to rank " << peer_world;
  if (kind == OpKind::recv) os << " from rank " << peer_world;
  if (kind == OpKind::broadcast || kind == OpKind::reduce) os << " (root " << peer_world << ")";
  if (!world_ranks.empty()) {
    os << " in the group of ranks {";
    for (size_t i = 0; i < world_ranks.size(); ++i) os << (i ? "," : "") << world_ranks[i];
    os << "}";
  }
  if (tensor.defined()) {
    os << " of ";
    if (!label.empty()) os << "'" << label << "' ";
    os << "(" << dtype_name(tensor.dtype()) << " " << shape_str(tensor.sizes()) << ", "
       << human_bytes(static_cast<double>(tensor.numel()) *
                      static_cast<double>(tensor.element_size()))
       << ")";
  }
  os << " [collective #" << seq << "]";
  return os.str();
}

void MpiWork::finish(std::string error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

bool MpiWork::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void MpiWork::wait() {
  GRADUS_PROFILE_SCOPE(comm, "Work.wait");  // the Communication track
  g_last_wait_start.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  g_waiters.fetch_add(1, std::memory_order_relaxed);
  struct Leave {
    ~Leave() { g_waiters.fetch_sub(1, std::memory_order_relaxed); }
  } leave;
  std::unique_lock<std::mutex> lock(mutex_);
  // The communication thread enforces the timeout and reports with a diagnosis; this deadline
  // only guards against that thread itself being stuck inside MPI.
  const auto deadline =
      issued + std::chrono::duration_cast<Clock::duration>(timeout) + std::chrono::seconds(10);
  if (!done_cv_.wait_until(lock, deadline, [&] { return done_; })) {
    throw DistError("dist: " + describe() + " on rank " + std::to_string(comm_rank) +
                    " did not complete and the communication thread stopped reporting (stuck "
                    "inside MPI)");
  }
  if (!error_.empty()) throw DistError(error_);
}

// ---------------------------------------------------------------------------------- MpiEngine

MpiEngine::MpiEngine(int rank, int size, InitOptions options)
    : rank_(rank),
      size_(size),
      options_(options),
      silence_(options.heartbeat_silence_seconds > 0
                   ? options.heartbeat_silence_seconds
                   : std::min(5.0, std::max(1.5, options.timeout_seconds / 2))) {
  create_mpi_types();
  MPI_Comm_dup(MPI_COMM_WORLD, &heartbeat_comm_);
  MPI_Comm_set_errhandler(heartbeat_comm_, MPI_ERRORS_RETURN);
  peers_.resize(static_cast<size_t>(size_));
  const Clock::time_point now = Clock::now();
  for (int p = 0; p < size_; ++p) {
    Peer& peer = peers_[static_cast<size_t>(p)];
    peer.last_heard = now;
    if (p == rank_) continue;
    MPI_Irecv(peer.recv_buffer, 3, MPI_INT64_T, p, kHeartbeatTag, heartbeat_comm_,
              &peer.recv_request);
  }
  last_heartbeat_ = now - kHeartbeatInterval;  // the first one goes out at once
  thread_ = std::thread([this] { run(); });
}

MpiEngine::~MpiEngine() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
}

void MpiEngine::submit(const std::shared_ptr<MpiWork>& work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_) {
      work->finish("dist: " + work->describe() + " on rank " + std::to_string(rank_) +
                   " was not started: an earlier collective failed or timed out");
      return;
    }
    if (stopping_) {
      work->finish("dist: " + work->describe() + " was issued after dist::finalize()");
      return;
    }
    work->seq = static_cast<uint64_t>(++issued_);
    queue_.push_back(work);
  }
  wake_.notify_all();
}

bool MpiEngine::broken() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_;
}

bool MpiEngine::shutdown() {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  wake_.notify_all();
  thread_done_cv_.wait(lock, [&] { return thread_done_; });
  lock.unlock();
  if (thread_.joinable()) thread_.join();
  return stopped_cleanly_;
}

void MpiEngine::start(const std::shared_ptr<MpiWork>& w) {
  MpiWork& work = *w;
  const MPI_Comm comm = work.comm;
  int rc = MPI_SUCCESS;
  if (work.kind == OpKind::barrier) {
    rc = MPI_Ibarrier(comm, &work.request);
  } else if (work.kind == OpKind::split) {
    // Blocking, so it runs here on the thread that owns MPI. The caller first all-gathered the
    // colors through the engine (with its timeout), so every rank is known to be on its way.
    rc = MPI_Comm_split(comm, work.tag < 0 ? MPI_UNDEFINED : work.tag, work.peer, &work.new_comm);
    if (rc == MPI_SUCCESS && work.new_comm != MPI_COMM_NULL) {
      MPI_Comm_set_errhandler(work.new_comm, MPI_ERRORS_RETURN);
    }
    if (rc == MPI_SUCCESS) {
      ++completed_;
      work.finish({});
      return;
    }
  } else {
    void* data = work.tensor.raw_data();
    const DType dtype = work.tensor.dtype();
    const MPI_Datatype type = mpi_datatype(dtype);
    const int count = static_cast<int>(work.tensor.numel());
    switch (work.kind) {
      case OpKind::all_reduce:
        rc = MPI_Iallreduce(MPI_IN_PLACE, data, count, type, mpi_op(work.op, dtype), comm,
                            &work.request);
        break;
      case OpKind::broadcast:
        rc = MPI_Ibcast(data, count, type, work.peer, comm, &work.request);
        break;
      case OpKind::reduce:
        rc = MPI_Ireduce(work.comm_rank == work.peer ? MPI_IN_PLACE : data,
                         work.comm_rank == work.peer ? data : nullptr, count, type,
                         mpi_op(work.op, dtype), work.peer, comm, &work.request);
        break;
      case OpKind::reduce_scatter:
        rc = MPI_Ireduce_scatter_block(work.input.raw_data(), data, count, type,
                                       mpi_op(work.op, dtype), comm, &work.request);
        break;
      case OpKind::all_gather: {
        const int chunk = static_cast<int>(work.input.numel());
        const char* own = static_cast<const char*>(data) + static_cast<size_t>(work.comm_rank) *
                                                               static_cast<size_t>(chunk) *
                                                               work.tensor.element_size();
        const bool in_place = work.input.raw_data() == own;
        rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : work.input.raw_data(), chunk, type, data,
                            chunk, type, comm, &work.request);
        break;
      }
      case OpKind::send:
        rc = MPI_Isend(data, count, type, work.peer, work.tag, comm, &work.request);
        break;
      case OpKind::recv:
        rc = MPI_Irecv(data, count, type, work.peer, work.tag, comm, &work.request);
        break;
      case OpKind::barrier:
      case OpKind::split:
        break;
    }
  }
  if (rc != MPI_SUCCESS) {
    work.finish("dist: " + work.describe() + " failed to start on rank " +
                std::to_string(work.comm_rank) + ": " + mpi_error_string(rc));
    return;
  }
  in_flight_.push_back(w);
}

void MpiEngine::complete(MpiWork& work) {
  ++completed_;
  if (work.op == ReduceOp::avg &&
      (work.kind == OpKind::all_reduce || work.kind == OpKind::reduce_scatter ||
       (work.kind == OpKind::reduce && work.comm_rank == work.peer))) {
    scale_in_place(work.tensor, 1.0 / static_cast<double>(work.comm_size));
  }
  work.finish({});
}

void MpiEngine::heartbeat(Clock::time_point now, bool goodbye) {
  if (!goodbye && now - last_heartbeat_ < kHeartbeatInterval) return;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Peer& peer = peers_[static_cast<size_t>(p)];
    if (peer.send_request != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Test(&peer.send_request, &flag, MPI_STATUS_IGNORE);
      if (!flag) continue;  // the previous one is still buffered: never pile up heartbeats
    }
    if (peer.send_buffer[2] != 0) continue;  // goodbye already sent: nothing follows it
    peer.send_buffer[0] = issued_;
    peer.send_buffer[1] = completed_;
    peer.send_buffer[2] = goodbye ? 1 : 0;
    MPI_Isend(peer.send_buffer, 3, MPI_INT64_T, p, kHeartbeatTag, heartbeat_comm_,
              &peer.send_request);
  }
  last_heartbeat_ = now;
}

void MpiEngine::poll_heartbeats(Clock::time_point now) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Peer& peer = peers_[static_cast<size_t>(p)];
    while (peer.recv_request != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Test(&peer.recv_request, &flag, MPI_STATUS_IGNORE);
      if (!flag) break;
      peer.last_heard = now;
      peer.issued = peer.recv_buffer[0];
      peer.completed = peer.recv_buffer[1];
      if (peer.recv_buffer[2] != 0) {
        peer.said_goodbye = true;  // messages are not overtaken: nothing else will come
        break;
      }
      MPI_Irecv(peer.recv_buffer, 3, MPI_INT64_T, p, kHeartbeatTag, heartbeat_comm_,
                &peer.recv_request);
    }
  }
}

std::string MpiEngine::diagnose(const MpiWork& work, Clock::time_point now) const {
  std::ostringstream silent, behind;
  int n_silent = 0, n_behind = 0;
  // A sub-group's operation waits only on its members, and their issue counts include other
  // groups' operations, so "has not reached #seq" is only meaningful on the world.
  const bool on_world = work.world_ranks.empty();
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (!on_world &&
        std::find(work.world_ranks.begin(), work.world_ranks.end(), p) == work.world_ranks.end()) {
      continue;
    }
    const Peer& peer = peers_[static_cast<size_t>(p)];
    const double quiet = seconds(now - peer.last_heard);
    if (quiet > silence_.count() && !peer.said_goodbye) {
      silent << (n_silent++ ? ", " : "") << "rank " << p << " (last heard " << std::fixed
             << std::setprecision(1) << quiet << " s ago, after issuing " << peer.issued
             << " collectives)";
    } else if (on_world && peer.issued < static_cast<int64_t>(work.seq)) {
      behind << (n_behind++ ? ", " : "") << "rank " << p << " (has issued " << peer.issued << ")";
    }
  }
  std::ostringstream os;
  if (n_silent > 0) {
    os << (n_silent == 1 ? "the rank that stopped answering: " : "ranks that stopped answering: ")
       << silent.str() << " (it died, was stopped or its host is unreachable)";
  } else if (n_behind > 0) {
    os << "every rank still answers, but these have not reached collective #" << work.seq << ": "
       << behind.str()
       << " (slow, stuck in a long computation, or issuing collectives in a different order)";
  } else if (!on_world) {
    os << "every rank of the group still answers (one is behind, stuck in a long computation or "
          "issuing its operations in a different order, or a network or MPI stall)";
  } else {
    os << "every rank still answers and has issued this collective (a network or MPI stall)";
  }
  return os.str();
}

void MpiEngine::fail_everything(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    broken_ = true;
    for (auto& w : queue_) in_flight_.push_back(w);
    queue_.clear();
  }
  for (auto& w : in_flight_) {
    // The request cannot be completed any more; it is abandoned (the job is going to abort).
    w->finish(why);
  }
  in_flight_.clear();
}

bool MpiEngine::goodbye_done() {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Peer& peer = peers_[static_cast<size_t>(p)];
    if (!peer.said_goodbye) return false;
    if (peer.send_request != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Test(&peer.send_request, &flag, MPI_STATUS_IGNORE);
      if (!flag) return false;
    }
    if (peer.send_buffer[2] == 0) return false;  // ours not sent yet
  }
  return true;
}

void MpiEngine::run() {
  std::vector<std::shared_ptr<MpiWork>> starting;
  Clock::time_point goodbye_deadline{};
  bool saying_goodbye = false;
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (queue_.empty() && in_flight_.empty() && !stopping_) {
        wake_.wait_for(lock, std::chrono::milliseconds(100));
      }
      starting.assign(queue_.begin(), queue_.end());
      queue_.clear();
      stopping = stopping_;
    }
    for (auto& w : starting) start(w);
    starting.clear();

    for (size_t i = 0; i < in_flight_.size();) {
      int flag = 0;
      const int rc = MPI_Test(&in_flight_[i]->request, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        in_flight_[i]->finish("dist: " + in_flight_[i]->describe() + " failed on rank " +
                              std::to_string(rank_) + ": " + mpi_error_string(rc));
        std::lock_guard<std::mutex> lock(mutex_);
        broken_ = true;
        in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (flag) {
        complete(*in_flight_[i]);
        in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }

    const Clock::time_point now = Clock::now();
    poll_heartbeats(now);
    if (!in_flight_.empty()) {
      const MpiWork& oldest = *in_flight_.front();
      if (now - oldest.issued > oldest.timeout) {
        std::ostringstream why;
        why << "dist: " << oldest.describe() << " timed out after " << std::fixed
            << std::setprecision(1) << seconds(now - oldest.issued) << " s on rank " << rank_
            << " of " << size_ << ": " << diagnose(oldest, now)
            << ". The job is aborted; restart it with --resume to continue from the last "
               "checkpoint";
        fail_everything(why.str());
      }
    }

    if (stopping && in_flight_.empty()) {
      if (!saying_goodbye) {
        saying_goodbye = true;
        goodbye_deadline = now + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(options_.timeout_seconds));
      }
      heartbeat(now, /*goodbye=*/true);
      bool clean = !broken();
      if (clean && !goodbye_done()) {
        if (now < goodbye_deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          continue;
        }
        clean = false;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      stopped_cleanly_ = clean;
      thread_done_ = true;
      thread_done_cv_.notify_all();
      return;
    }
    heartbeat(now, /*goodbye=*/false);
    if (!in_flight_.empty()) {
      const Clock::time_point wait_start{
          Clock::duration(g_last_wait_start.load(std::memory_order_relaxed))};
      if (g_waiters.load(std::memory_order_relaxed) > 0 && now - wait_start < kSpinAfterWait) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(kPollInterval);
      }
    }
  }
}

}  // namespace gradus::dist::detail
