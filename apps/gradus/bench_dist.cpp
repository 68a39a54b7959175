// gradus bench --dist ddp|ps|zero1|zero2|fsdp: times the global step of data-parallel training
// (forward, cross-entropy, backward, gradient synchronisation, Adam step) over the ranks of
// mpirun/srun and prints ONE JSON line from rank 0.
//
// --batch-size is the global batch; each rank trains on its share, on its own random batches
// (the model starts from the same seed everywhere). A step's time is the slowest rank's median
// (every rank waits for the others each step). Besides the time it reports what each rank moved
// per step (payload bytes handed to MPI/NCCL, from the process group's counters), what each rank
// holds between steps (train::Strategy::memory_footprint: parameter, gradient and optimizer-state
// bytes, counted by tensor storage) and the most its tensors held at once during one step
// (peak_bytes: the host's or the GPU's allocation counter), and for ddp how long backward waited at
// its end for communication still in flight and how long the same gradients take to all-reduce
// alone: with both, the fraction of the communication hidden behind backward is 1 - wait / comm.
// For zero2 and fsdp it reports how long the step waited for all-gathers and reduce-scatters
// still in flight (--no-prefetch: each block's gather starts only when the block runs).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "gradus/core/cuda.h"
#include "gradus/dist/dist.h"
#include "gradus/gradus.h"
#include "gradus/nn/models.h"
#include "gradus/optim/adam.h"
#include "gradus/train/strategy.h"
#include "language_model.h"
#include "timing.h"

namespace gradus::cli {

namespace {

// Every rank's value, in rank order (a collective).
std::vector<double> gather(dist::ProcessGroup& group, double value) {
  Tensor all = zeros({group.size()}, {.dtype = DType::f64});
  Tensor mine = tensor({value}, {1}, {.dtype = DType::f64});
  group.all_gather(all, mine, "bench statistics")->wait();
  return all.to_vector<double>();
}

// Median time to all-reduce `numel` f32 values (avg), with no compute beside it: what the
// gradient synchronisation of one step costs when nothing hides it.
double time_all_reduce(dist::ProcessGroup& group, int64_t numel, Device device, int warmup,
                       int steps) {
  Tensor flat = randn({numel}, {DType::f32, device});
  std::vector<double> times;
  for (int i = 0; i < warmup + steps; ++i) {
    group.barrier()->wait();
    const auto t0 = Clock::now();
    group.all_reduce(flat, dist::ReduceOp::avg, "all-reduce alone")->wait();
    if (device.is_cuda()) cuda::synchronize();
    if (i >= warmup) times.push_back(ms_since(t0));
  }
  return median(times);
}

}  // namespace

int run_bench_dist(const BenchOptions& o) {
  apply_threads(o.threads);
  const dist::World& world = dist::init({.timeout_seconds = o.dist_timeout});
  GRADUS_CHECK(o.gemm == 0 && !o.compare_devices, ValueError,
               "bench: --dist times training steps; it cannot be combined with --gemm or "
               "--compare-devices");
  GRADUS_CHECK(o.batch_size % world.size == 0, ValueError, "bench: --batch-size ", o.batch_size,
               " (the global batch) is not divisible by the ", world.size,
               " ranks; use a multiple of ", world.size);
  GRADUS_CHECK(!o.no_overlap || o.dist == "ddp", ValueError,
               "bench: --no-overlap applies to --dist ddp only (got --dist ", o.dist, ")");
  const bool fully_sharded = o.dist == "zero2" || o.dist == "fsdp";
  GRADUS_CHECK(!o.no_prefetch || fully_sharded, ValueError,
               "bench: --no-prefetch applies to --dist zero2|fsdp only (got --dist ", o.dist, ")");
  Device device = resolve_device(o.device);
  if (device.is_cuda()) device = Device::cuda(cuda::current_device());
  auto group = dist::default_group();
  const int64_t per_rank = o.batch_size / world.size;

  manual_seed(o.seed);  // the same initial model on every rank
  // The language models (AdamW, as `gradus bench --model gpt|llama` and `train`) on token
  // windows of --context; the image models (Adam) on 28x28 images.
  const bool gpt = o.model == "gpt" || o.model == "llama";
  const std::string name = o.model == "mlp"   ? "mlp-bench"
                           : o.model == "cnn" ? "cnn-bench"
                                              : o.model;
  std::shared_ptr<nn::Module> model =
      gpt ? spec_from_shape(o.model, o.gpt, o.vocab_size).make() : nn::make_model(name);
  model->to(device);
  model->train();
  const std::unique_ptr<train::Strategy> strategy = train::make_strategy(
      o.dist, {.ddp = dist::DDPOptions{.bucket_cap_mb = o.bucket_cap_mb, .overlap = !o.no_overlap},
               .fsdp = dist::FullyShardOptions{.prefetch = !o.no_prefetch},
               .gather_dtype = communication_dtype("--gather-dtype", o.gather_dtype, o.dist),
               .reduce_dtype = communication_dtype("--reduce-dtype", o.reduce_dtype, o.dist)});
  strategy->setup(model, [gpt](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
    if (gpt) return std::make_unique<optim::AdamW>(p);
    return std::make_unique<optim::Adam>(p);
  });
  optim::Optimizer& optimizer = strategy->optimizer();
  amp::GradScaler scaler({.enabled = false});
  // DDP's own figures: how long backward waited for communication.
  const auto* ddp = dynamic_cast<const dist::DistributedDataParallel*>(&strategy->module());
  // ZeRO-2/FSDP's: how long the step waited for gathers and reductions not done yet.
  const auto* sharded =
      fully_sharded ? dynamic_cast<const dist::ZeroRedundancyOptimizer*>(&optimizer) : nullptr;

  // Each rank's own pool of random batches (see bench.cpp for why a pool).
  manual_seed(o.seed + 1 + static_cast<uint64_t>(world.rank));
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 16; ++i) {
    if (gpt) {
      xs.push_back(randint(0, o.vocab_size, {per_rank, o.gpt.context}, {DType::i64, device}));
      ys.push_back(randint(0, o.vocab_size, {per_rank, o.gpt.context}, {DType::i64, device}));
    } else {
      xs.push_back(randn({per_rank, 1, 28, 28}, {DType::f32, device}));
      ys.push_back(randint(0, 10, {per_rank}, {DType::i64, device}));
    }
  }
  size_t next = 0;
  auto step = [&] {
    const size_t i = next++ % xs.size();
    optimizer.zero_grad();
    strategy->before_forward();
    const Tensor out = strategy->module()(xs[i]);
    const Tensor loss = gpt ? cross_entropy(out.reshape({-1, o.vocab_size}), ys[i].reshape({-1}))
                            : cross_entropy(out, ys[i]);
    loss.backward();
    strategy->step(scaler);
    return loss.item();  // waits for the device
  };
  for (int i = 0; i < o.warmup; ++i) step();
  group->barrier()->wait();
  const dist::CommStats before = group->stats();
  const dist::DDPStats ddp_before = ddp ? ddp->stats() : dist::DDPStats{};
  const dist::ZeroRedundancyOptimizer::Stats sharded_before =
      sharded ? sharded->stats() : dist::ZeroRedundancyOptimizer::Stats{};
  double last_loss = 0;
  const std::vector<double> times = time_steps(0, o.steps, o.repeats, [&] { last_loss = step(); });
  const int timed = o.steps * o.repeats;
  const dist::CommStats after = group->stats();
  const double sent = static_cast<double>(after.bytes_sent - before.bytes_sent) / timed;
  const double received = static_cast<double>(after.bytes_received - before.bytes_received) / timed;
  const double wait_ms =
      ddp ? (ddp->stats().wait_seconds - ddp_before.wait_seconds) * 1e3 / timed : 0.0;
  const dist::ZeroRedundancyOptimizer::Stats sharded_after =
      sharded ? sharded->stats() : dist::ZeroRedundancyOptimizer::Stats{};
  const double gather_wait_ms =
      (sharded_after.gather_wait_seconds - sharded_before.gather_wait_seconds) * 1e3 / timed;
  const double reduce_wait_ms =
      (sharded_after.reduce_wait_seconds - sharded_before.reduce_wait_seconds) * 1e3 / timed;
  const double comm_ms =
      ddp ? time_all_reduce(*group, model->num_parameters(), device, o.warmup, o.steps) : 0.0;
  // What each rank holds between steps, then the most its tensors held during one more step.
  const train::MemoryFootprint held = strategy->memory_footprint();
  if (device.is_cuda()) {
    cuda::synchronize();
    cuda::reset_peak_memory_stats(device.index());
  } else {
    host::reset_peak_memory();
  }
  step();
  const double peak =
      static_cast<double>(device.is_cuda() ? cuda::memory_stats(device.index()).peak_allocated
                                           : host::memory_stats().peak_allocated_bytes);

  // Collectives: every rank takes part, rank 0 prints.
  const std::vector<double> step_ms = gather(*group, median(times));
  const std::vector<double> sent_all = gather(*group, sent);
  const std::vector<double> received_all = gather(*group, received);
  const std::vector<double> parameter_all =
      gather(*group, static_cast<double>(held.parameter_bytes));
  const std::vector<double> gradient_all = gather(*group, static_cast<double>(held.gradient_bytes));
  const std::vector<double> state_all =
      gather(*group, static_cast<double>(held.optimizer_state_bytes));
  const std::vector<double> peak_all = gather(*group, peak);
  const std::vector<double> wait_all = gather(*group, wait_ms);
  const std::vector<double> loss_all = gather(*group, last_loss);
  const std::vector<double> gather_wait_all = gather(*group, gather_wait_ms);
  const std::vector<double> reduce_wait_all = gather(*group, reduce_wait_ms);
  if (world.rank != 0) return 0;

  const double ms = *std::max_element(step_ms.begin(), step_ms.end());
  double loss = 0;
  for (double l : loss_all) loss += l / world.size;
  auto as_int = [](const std::vector<double>& v) {
    std::vector<int64_t> out;
    for (double x : v) out.push_back(static_cast<int64_t>(x + 0.5));
    return out;
  };
  nlohmann::ordered_json out = {{"benchmark", "train_step_dist"},
                                {"dist", o.dist},
                                {"world_size", world.size},
                                {"launcher", world.launcher},
                                {"model", o.model},
                                {"model_name", name},
                                {"parameters", model->num_parameters()},
                                {"batch_size", o.batch_size},
                                {"batch_per_rank", per_rank},
                                {"threads", get_num_threads()},
                                {"device", device.str()},
                                {"ms_per_step", ms},
                                {"ms_per_step_by_rank", step_ms},
                                {"samples_per_s", static_cast<double>(o.batch_size) / (ms * 1e-3)},
                                {"bytes_sent_per_step", as_int(sent_all)},
                                {"bytes_received_per_step", as_int(received_all)},
                                {"parameter_bytes", as_int(parameter_all)},
                                {"gradient_bytes", as_int(gradient_all)},
                                {"optimizer_state_bytes", as_int(state_all)},
                                {"peak_bytes", as_int(peak_all)},
                                {"steps", o.steps},
                                {"warmup", o.warmup},
                                {"repeats", o.repeats},
                                {"final_loss", loss}};
  if (ddp) {
    const double wait = *std::max_element(wait_all.begin(), wait_all.end());
    out["overlap"] = !o.no_overlap;
    out["bucket_cap_mb"] = o.bucket_cap_mb;
    out["comm_wait_ms_per_step"] = wait;
    out["all_reduce_alone_ms"] = comm_ms;
    out["comm_hidden_fraction"] = comm_ms > 0 ? std::clamp(1.0 - wait / comm_ms, 0.0, 1.0) : 0.0;
  }
  if (sharded) {
    out["prefetch"] = !o.no_prefetch;
    out["gather_wait_ms_per_step"] =
        *std::max_element(gather_wait_all.begin(), gather_wait_all.end());
    out["reduce_wait_ms_per_step"] =
        *std::max_element(reduce_wait_all.begin(), reduce_wait_all.end());
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace gradus::cli
