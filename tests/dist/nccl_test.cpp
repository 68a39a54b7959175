// The GPU path of the process group (NCCL on a communication stream, ordered with events against
// the compute stream) and DDP on CUDA tensors, against references computed on the CPU in f64.
// CTest runs them with one rank in the `gpu` label (dist.gpu_np1; a machine with more GPUs can
// run test_dist under mpirun -np N); they skip where no CUDA device is visible.
#include "dist/data_parallel_util.h"
#include "gradus/core/cuda.h"

namespace gradus::testing {
namespace {

using dist::ReduceOp;

#define REQUIRE_CUDA()                                                      \
  do {                                                                      \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible"; \
  } while (0)

class Nccl : public ::testing::Test {
 protected:
  std::shared_ptr<dist::ProcessGroup> pg = dist::default_group();
  int rank = pg->rank();
  int size = pg->size();
  Device gpu() const { return Device::cuda(cuda::current_device()); }
};

Tensor input_of(uint64_t seed, int r, int64_t n) {
  return random_tensor({n}, rank_seed(seed, r), -2.0, 2.0, DType::f64);
}

TEST_F(Nccl, AllReduceEveryDtypeAgainstTheCpu) {
  REQUIRE_CUDA();
  const uint64_t seed = shared_seed();
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      for (int64_t n : {0, 1, 1001, 65537}) {
        Tensor expected = input_of(seed, 0, n).to(dtype).to(DType::f64);
        for (int r = 1; r < size; ++r) {
          const Tensor x = input_of(seed, r, n).to(dtype).to(DType::f64);
          expected = op == ReduceOp::max ? maximum(expected, x) : add(expected, x);
        }
        if (op == ReduceOp::avg) expected = mul(expected, 1.0 / size);
        Tensor t = input_of(seed, rank, n).to(dtype).to(gpu());
        pg->all_reduce(t, op, "x")->wait();
        const double tol = dtype == DType::f64 ? 1e-12 : dtype == DType::f32 ? 1e-6 : 2e-2;
        EXPECT_TRUE(all_close(t.to(Device::cpu()).to(DType::f64), expected, tol * size, tol * size))
            << dtype_name(dtype) << " " << dist::reduce_op_name(op) << " n=" << n;
      }
    }
  }
}

TEST_F(Nccl, BroadcastAllGatherReduceScatter) {
  REQUIRE_CUDA();
  const uint64_t seed = shared_seed();
  const int64_t chunk = 4099;
  // broadcast from the last rank
  Tensor b = input_of(seed, rank, chunk).to(DType::f32).to(gpu());
  pg->broadcast(b, size - 1, "b")->wait();
  EXPECT_TRUE(all_close(b.to(Device::cpu()).to(DType::f64),
                        input_of(seed, size - 1, chunk).to(DType::f32).to(DType::f64), 0, 0));
  // all_gather: every rank's chunk in rank order
  Tensor gathered = empty({chunk * size}, {DType::f32, gpu()});
  pg->all_gather(gathered, input_of(seed, rank, chunk).to(DType::f32).to(gpu()), "g")->wait();
  const Tensor host = gathered.to(Device::cpu()).to(DType::f64);
  for (int r = 0; r < size; ++r) {
    EXPECT_TRUE(all_close(host.slice(0, r * chunk, (r + 1) * chunk),
                          input_of(seed, r, chunk).to(DType::f32).to(DType::f64), 0, 0))
        << "chunk of rank " << r;
  }
  // reduce_scatter: this rank's chunk of the sum
  Tensor out = empty({chunk}, {DType::f64, gpu()});
  Tensor expected = zeros({chunk}, {DType::f64});
  for (int r = 0; r < size; ++r) {
    expected = add(expected,
                   input_of(seed + 7, r, chunk * size).slice(0, rank * chunk, (rank + 1) * chunk));
  }
  pg->reduce_scatter(out, input_of(seed + 7, rank, chunk * size).to(gpu()), ReduceOp::sum, "rs")
      ->wait();
  EXPECT_TRUE(all_close(out.to(Device::cpu()), expected, 1e-12, 1e-12));
}

// The communication stream must see what the compute stream queued just before the collective,
// and work queued after wait() must see the collective's result: a large tensor produced by a
// kernel right before all_reduce, then changed by a kernel right after wait().
TEST_F(Nccl, CommunicationIsOrderedWithTheComputeStream) {
  REQUIRE_CUDA();
  const uint64_t seed = shared_seed();
  const int64_t n = int64_t{1} << 22;
  Tensor expected = zeros({n}, {DType::f64});
  for (int r = 0; r < size; ++r) expected = add(expected, mul(input_of(seed, r, n), 3.0));
  expected = add(expected, 1.0);
  for (int trial = 0; trial < 5; ++trial) {
    const Tensor x = input_of(seed, rank, n).to(gpu());
    Tensor y = mul(x, 3.0);  // queued on the compute stream; the host does not wait for it
    dist::WorkPtr w = pg->all_reduce(y, ReduceOp::sum, "y");
    w->wait();
    y = add(y, 1.0);  // reads the all-reduced buffer on the compute stream
    EXPECT_TRUE(all_close(y.to(Device::cpu()), expected, 1e-12, 1e-12)) << "trial " << trial;
  }
}

// Polling a pending collective (is_completed, as a training loop would between steps) sees the
// event "not ready", which CUDA also leaves as the thread's last error: the next kernel launch
// must not report it as its own failure, and a completed collective reports done. The collective
// waits behind a long matrix product, so the polls do see it pending (asserted).
TEST_F(Nccl, PollingAPendingCollectiveLeavesNoErrorForTheNextLaunch) {
  REQUIRE_CUDA();
  const Tensor a = random_tensor({4096, 4096}, shared_seed(), -1.0, 1.0, DType::f32).to(gpu());
  Tensor y = matmul(matmul(matmul(a, a), a), a);  // queued; the host does not wait
  dist::WorkPtr w = pg->all_reduce(y, ReduceOp::sum, "y");
  int64_t pending_polls = 0;
  while (!w->is_completed()) ++pending_polls;
  EXPECT_GT(pending_polls, 0) << "the collective finished before the first poll: nothing tested";
  Tensor z;
  EXPECT_NO_THROW(z = add(y, 1.0));
  EXPECT_NO_THROW(w->wait());
  EXPECT_TRUE(std::isfinite(sum(z).item()));
}

// DDP on CUDA: each rank's shard, one backward; the averaged gradients equal the gradient of the
// whole batch computed in one process on the CPU.
TEST_F(Nccl, DdpGradientsMatchTheOneProcessCpuReference) {
  REQUIRE_CUDA();
  const uint64_t seed = shared_seed();
  const Batch batch = make_batch(seed, {8 * size, 1, 8, 8}, 5);
  auto ref = build("mlp", seed);
  auto model = build("mlp", seed);
  model->to(gpu());
  auto ddp = std::make_shared<dist::DistributedDataParallel>(model);
  const Batch part = shard(batch, rank, size);
  cross_entropy((*ddp)(part.x.to(gpu())), part.y.to(gpu())).backward();
  Tensor loss;
  for (int r = 0; r < size; ++r) {
    const Batch p = shard(batch, r, size);
    Tensor l = cross_entropy((*ref)(p.x), p.y);
    loss = loss.defined() ? add(loss, l) : l;
  }
  mul(loss, 1.0 / size).backward();
  const auto mine = model->parameters(), theirs = ref->parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_LT(max_rel_diff(mine[i].grad().to(Device::cpu()), theirs[i].grad()), 1e-12)
        << "parameter " << i;
  }
}

}  // namespace
}  // namespace gradus::testing
