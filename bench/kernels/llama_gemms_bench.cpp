// The GEMMs of the CPU Llama benchmark's training step (batch 4 x context 256 = 1024 tokens, width
// 256, SwiGLU width 704, 2 key/value heads of 32, float32): for each projection shape in -> out,
// the forward x W^T, the input gradient g W and the weight gradient g^T x, one after the other
// (the twelve products of one layer's kinds, each once). GRADUS_BALANCED_GEMM=0 puts them back on
// oneDNN's matmul, cut evenly between the threads (src/backend/cpu/balanced_gemm.h).
//   build/bench/kernels/bench_llama_gemms --benchmark_min_time=1   (GRADUS_BENCH_THREADS, default
//   2)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>

#include "gradus/gradus.h"

namespace {

using gradus::Tensor;

void BM_llama_gemms(benchmark::State& state) {
  const char* threads = std::getenv("GRADUS_BENCH_THREADS");
  gradus::set_num_threads(threads != nullptr ? std::atoi(threads) : 2);
  gradus::manual_seed(static_cast<uint64_t>(std::random_device{}()));
  constexpr int64_t kTokens = 1024;
  struct Operands {
    Tensor x, w, g;
  };
  std::vector<Operands> ops;
  int64_t flops = 0;
  for (const auto& [in, out] :
       std::vector<std::pair<int64_t, int64_t>>{{256, 704}, {704, 256}, {256, 256}, {256, 64}}) {
    ops.push_back(
        {gradus::randn({kTokens, in}), gradus::randn({out, in}), gradus::randn({kTokens, out})});
    flops += 3 * 2 * kTokens * in * out;
  }
  for (auto _ : state) {
    for (const Operands& o : ops) {
      benchmark::DoNotOptimize(gradus::mm(o.x, o.w.t()).data_ptr<float>());
      benchmark::DoNotOptimize(gradus::mm(o.g, o.w).data_ptr<float>());
      benchmark::DoNotOptimize(gradus::mm(o.g.t(), o.x).data_ptr<float>());
    }
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(static_cast<double>(flops) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_llama_gemms)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
