// The world's group: validates every call once, then hands CPU tensors to the MPI engine and CUDA
// tensors to NCCL. In a world of one (no launcher) every collective is its own result.
#include <algorithm>
#include <atomic>
#include <climits>
#include <mutex>

#include "dist/group_impl.h"
#include "dist/mpi_engine.h"
#include "gradus/autograd.h"
#include "gradus/core/profiling.h"
#include "gradus/ops.h"

namespace gradus::dist {

void wait_all(const std::vector<WorkPtr>& works) {
  GRADUS_PROFILE_SCOPE(comm, "wait");
  std::exception_ptr first;
  for (const WorkPtr& w : works) {
    if (!w) continue;
    try {
      w->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

namespace detail {
namespace {

class DoneWork final : public Work {
 public:
  bool is_completed() override { return true; }
  void wait() override {}
};

bool is_float(DType d) {
  return d == DType::f32 || d == DType::f64 || d == DType::f16 || d == DType::bf16;
}

// The world's group, or a sub-group of it (split_group): `members` are the world ranks of the
// group; `comm` its MPI communicator (MPI_COMM_NULL without MPI, a world of one).
class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup(int rank, const std::vector<int>& members, std::chrono::duration<double> timeout,
           bool uses_mpi, MPI_Comm comm, bool is_world)
      : ProcessGroup(rank, static_cast<int>(members.size()), timeout, members),
        uses_mpi_(uses_mpi),
        comm_(comm),
        is_world_(is_world) {
    nccl_world_.rank = rank_;
    nccl_world_.size = size_;
    nccl_world_.launcher = uses_mpi ? "mpirun" : "none";
  }

  WorkPtr all_reduce(const Tensor& t, ReduceOp op, const std::string& label) override {
    check(t, "all_reduce", label, op);
    if (t.is_cuda()) return nccl().all_reduce(t, op, label);
    if (!uses_mpi_) return done(t, t);
    return submit(OpKind::all_reduce, t, {}, 0, 0, op, label);
  }

  WorkPtr broadcast(const Tensor& t, int root, const std::string& label) override {
    check(t, "broadcast", label);
    check_rank(root, "broadcast", "root");
    if (t.is_cuda()) return nccl().broadcast(t, root, label);
    if (!uses_mpi_) return done(t, t);
    return submit(OpKind::broadcast, t, {}, root, 0, ReduceOp::sum, label);
  }

  WorkPtr reduce(const Tensor& t, int root, ReduceOp op, const std::string& label) override {
    check(t, "reduce", label, op);
    check_rank(root, "reduce", "root");
    if (t.is_cuda()) return nccl().reduce(t, root, op, label);
    if (!uses_mpi_) return done(t, t);
    return submit(OpKind::reduce, t, {}, root, 0, op, label);
  }

  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                         const std::string& label) override {
    check(output, "reduce_scatter", label, op);
    check(input, "reduce_scatter", label, op);
    check_pair(output, input, "reduce_scatter", label);
    GRADUS_CHECK(input.numel() == output.numel() * size_, ShapeError, "dist::reduce_scatter",
                 named(label), ": the input has ", input.numel(), " elements, expected ", size_,
                 " ranks x ", output.numel(), " (the output's size) = ", output.numel() * size_);
    if (input.is_cuda()) return nccl().reduce_scatter(output, input, op, label);
    if (!uses_mpi_) return done(output, input);
    return submit(OpKind::reduce_scatter, output, input, 0, 0, op, label);
  }

  WorkPtr all_gather(const Tensor& output, const Tensor& input, const std::string& label) override {
    check(output, "all_gather", label);
    check(input, "all_gather", label);
    check_pair(output, input, "all_gather", label);
    GRADUS_CHECK(output.numel() == input.numel() * size_, ShapeError, "dist::all_gather",
                 named(label), ": the output has ", output.numel(), " elements, expected ", size_,
                 " ranks x ", input.numel(), " (the input's size) = ", input.numel() * size_);
    if (input.is_cuda()) return nccl().all_gather(output, input, label);
    if (!uses_mpi_) return done(output, input);
    return submit(OpKind::all_gather, output, input, 0, 0, ReduceOp::sum, label);
  }

  WorkPtr send(const Tensor& t, int dst, int tag, const std::string& label) override {
    check(t, "send", label);
    check_peer(dst, "send", "destination", tag);
    if (t.is_cuda()) return nccl().send(t, dst, label);
    return submit(OpKind::send, t, {}, dst, tag, ReduceOp::sum, label);
  }

  WorkPtr recv(const Tensor& t, int src, int tag, const std::string& label) override {
    check(t, "recv", label);
    check_peer(src, "recv", "source", tag);
    if (t.is_cuda()) return nccl().recv(t, src, label);
    return submit(OpKind::recv, t, {}, src, tag, ReduceOp::sum, label);
  }

  WorkPtr barrier() override {
    if (!uses_mpi_) return std::make_shared<DoneWork>();
    return submit(OpKind::barrier, {}, {}, 0, 0, ReduceOp::sum, "");
  }

  CommStats stats() const override {
    CommStats s;
    s.collectives = collectives_.load();
    s.bytes_sent = bytes_sent_.load();
    s.bytes_received = bytes_received_.load();
    return s;
  }

 private:
  static std::string named(const std::string& label) {
    return label.empty() ? std::string() : " of '" + label + "'";
  }

  void check(const Tensor& t, const char* op, const std::string& label,
             ReduceOp reduce = ReduceOp::sum) const {
    const std::string where = std::string("dist::") + op + named(label) + " on rank " +
                              std::to_string(world_ranks_[static_cast<size_t>(rank_)]);
    GRADUS_CHECK(t.defined(), ValueError, where, ": the tensor is undefined");
    GRADUS_CHECK(t.is_contiguous(), ValueError, where, ": the tensor ", shape_str(t.sizes()),
                 " is not contiguous (call .contiguous() first)");
    GRADUS_CHECK(
        is_float(t.dtype()) || t.dtype() == DType::i32 || t.dtype() == DType::i64 ||
            ((t.dtype() == DType::u8) && (std::string(op) == "broadcast" ||
                                          std::string(op) == "send" || std::string(op) == "recv")),
        DTypeError, where, ": dtype ", dtype_name(t.dtype()),
        " is not supported (f32, f64, f16, bf16, i32, i64)");
    GRADUS_CHECK(reduce != ReduceOp::avg || is_float(t.dtype()), DTypeError, where,
                 ": avg needs a floating tensor, got ", dtype_name(t.dtype()));
    GRADUS_CHECK(t.numel() <= INT_MAX, ValueError, where, ": ", t.numel(),
                 " elements exceed MPI's count limit (", INT_MAX, "); split the tensor");
  }

  void check_pair(const Tensor& output, const Tensor& input, const char* op,
                  const std::string& label) const {
    GRADUS_CHECK(output.dtype() == input.dtype() && output.device() == input.device(), ValueError,
                 "dist::", op, named(label), ": output (", dtype_name(output.dtype()), ", ",
                 output.device().str(), ") and input (", dtype_name(input.dtype()), ", ",
                 input.device().str(), ") differ in dtype or device");
  }

  void check_rank(int r, const char* op, const char* what) const {
    GRADUS_CHECK(r >= 0 && r < size_, ValueError, "dist::", op, ": ", what, " rank ", r,
                 " is outside the ", is_world_ ? "world" : "group", " of ", size_, " rank(s)");
  }

  void check_peer(int r, const char* op, const char* what, int tag) const {
    check_rank(r, op, what);
    GRADUS_CHECK(r != rank_, ValueError, "dist::", op, ": rank ", rank_,
                 " cannot exchange with itself");
    GRADUS_CHECK(tag >= 0 && tag < 32767, ValueError, "dist::", op, ": tag ", tag,
                 " is outside [0, 32767)");
  }

  WorkPtr done(const Tensor& output, const Tensor& input) {
    // A world of one: reduce_scatter / all_gather copy; everything else is already the result.
    if (!output.same(input) && output.raw_data() != input.raw_data()) {
      NoGradGuard no_grad;
      output.detach().copy_(input.detach().reshape(output.sizes()));
    }
    ++collectives_;
    return std::make_shared<DoneWork>();
  }

  WorkPtr submit(OpKind kind, const Tensor& t, const Tensor& input, int peer, int tag, ReduceOp op,
                 const std::string& label) {
    GRADUS_PROFILE_SCOPE(comm, op_kind_name(kind));
    auto work = std::make_shared<MpiWork>();
    work->kind = kind;
    work->tensor = t;
    work->input = input;
    work->peer = peer;
    work->tag = tag;
    work->op = op;
    work->label = label;
    work->comm = comm_;
    if (!is_world_) work->world_ranks = world_ranks_;
    work->comm_rank = rank_;
    work->comm_size = size_;
    work->timeout = timeout_;
    work->issued = Clock::now();
    ++collectives_;
    const uint64_t bytes = t.defined() ? static_cast<uint64_t>(t.numel()) * t.element_size() : 0;
    if (kind == OpKind::send) {
      bytes_sent_ += bytes;
    } else if (kind == OpKind::recv) {
      bytes_received_ += bytes;
    } else if (kind != OpKind::barrier) {
      const uint64_t in =
          input.defined() ? static_cast<uint64_t>(input.numel()) * input.element_size() : bytes;
      bytes_sent_ += in;
      bytes_received_ += bytes;
    }
    mpi_engine().submit(work);
    return work;
  }

  NcclBackend& nccl() {
    // A sub-group gets its own NCCL communicator, bootstrapped through its own MPI one.
    std::call_once(nccl_once_, [&] { nccl_ = make_nccl_backend(*this, nccl_world_); });
    GRADUS_CHECK(nccl_ != nullptr, DeviceError, "dist: CUDA tensors need NCCL: ", nccl_status());
    return *nccl_;
  }

  World nccl_world_;  // this group seen as a world (its rank and size) by NCCL
  bool uses_mpi_;
  MPI_Comm comm_;
  bool is_world_;
  std::once_flag nccl_once_;
  std::unique_ptr<NcclBackend> nccl_;
  std::atomic<uint64_t> collectives_{0}, bytes_sent_{0}, bytes_received_{0};
};

}  // namespace

std::shared_ptr<ProcessGroup> make_world_group(const World& world, const InitOptions& options) {
  std::vector<int> members(static_cast<size_t>(world.size));
  for (int r = 0; r < world.size; ++r) members[static_cast<size_t>(r)] = r;
  return std::make_shared<MpiGroup>(
      world.rank, std::move(members), std::chrono::duration<double>(options.timeout_seconds),
      world.uses_mpi(), world.uses_mpi() ? MPI_COMM_WORLD : MPI_COMM_NULL,
      /*is_world=*/true);
}

}  // namespace detail

std::shared_ptr<ProcessGroup> split_group(int color, int key) {
  const std::shared_ptr<ProcessGroup> world = default_group();
  const int me = world->rank(), n = world->size();
  if (color < 0) color = kNoGroup;
  if (key < 0) key = me;
  // Every rank's (color, key), through the engine and its timeout: a rank that never calls
  // split_group fails this all-gather with a diagnosis instead of hanging MPI_Comm_split.
  Tensor mine = empty({2}, TensorOptions{.dtype = DType::i64});
  mine.data_ptr<int64_t>()[0] = color;
  mine.data_ptr<int64_t>()[1] = key;
  Tensor all = empty({2 * static_cast<int64_t>(n)}, TensorOptions{.dtype = DType::i64});
  world->all_gather(all, mine, "split_group colors")->wait();
  std::vector<std::pair<int64_t, int>> order;  // (key, world rank) of my color's members
  const int64_t* cv = all.data_ptr<int64_t>();
  for (int r = 0; r < n; ++r) {
    if (color != kNoGroup && cv[2 * r] == color) order.emplace_back(cv[2 * r + 1], r);
  }
  MPI_Comm comm = MPI_COMM_NULL;
  if (world_size() > 1) {
    auto work = std::make_shared<detail::MpiWork>();
    work->kind = detail::OpKind::split;
    work->comm = MPI_COMM_WORLD;
    work->comm_rank = me;
    work->comm_size = n;
    work->tag = color;
    work->peer = key;
    work->label = "split_group";
    work->timeout = world->timeout();
    work->issued = detail::Clock::now();
    detail::mpi_engine().submit(work);
    work->wait();
    comm = work->new_comm;
  }
  if (color == kNoGroup) return nullptr;
  std::sort(order.begin(), order.end());
  std::vector<int> members;
  int my_index = 0;
  for (const auto& [k, r] : order) {
    if (r == me) my_index = static_cast<int>(members.size());
    members.push_back(r);
  }
  return std::make_shared<detail::MpiGroup>(my_index, std::move(members), world->timeout(),
                                            world_size() > 1, comm, /*is_world=*/false);
}

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) {
  const std::shared_ptr<ProcessGroup> world = default_group();
  const int me = world->rank(), n = world->size();
  std::vector<int> seen(static_cast<size_t>(n), 0);
  int my_index = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    GRADUS_CHECK(r >= 0 && r < n, ValueError, "dist::new_group: rank ", r,
                 " is outside the world of ", n, " rank(s)");
    GRADUS_CHECK(!seen[static_cast<size_t>(r)]++, ValueError, "dist::new_group: rank ", r,
                 " is listed twice");
    if (r == me) my_index = static_cast<int>(i);
  }
  GRADUS_CHECK(!ranks.empty(), ValueError, "dist::new_group: the list of ranks is empty");
  // Every rank must pass the same list: compare a digest of it across the world first.
  uint64_t digest = 1469598103934665603ull;  // FNV-1a over the ranks
  for (const int r : ranks) digest = (digest ^ static_cast<uint64_t>(r)) * 1099511628211ull;
  Tensor mine = empty({1}, TensorOptions{.dtype = DType::i64});
  mine.data_ptr<int64_t>()[0] = static_cast<int64_t>(digest >> 1);
  Tensor all = empty({static_cast<int64_t>(n)}, TensorOptions{.dtype = DType::i64});
  world->all_gather(all, mine, "new_group ranks")->wait();
  for (int r = 0; r < n; ++r) {
    GRADUS_CHECK(all.data_ptr<int64_t>()[r] == mine.data_ptr<int64_t>()[0], DistError,
                 "dist::new_group: rank ", r, " passed a different list of ranks than rank ", me,
                 " (every rank must pass the same list)");
  }
  return split_group(my_index >= 0 ? 0 : kNoGroup, my_index);
}
}  // namespace gradus::dist
