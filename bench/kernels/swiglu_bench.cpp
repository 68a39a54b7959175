// The Llama MLP's activation, forward + backward, at the CPU benchmark's shape ([4, 256, 704]
// float32: batch 4, context 256, SwiGLU width 704): the fused op (swiglu: one kernel forward,
// one pass backward) against the composite it replaces (silu then mul: two kernels forward,
// three backward, and silu's output kept for the backward).
//   build/bench/kernels/bench_swiglu --benchmark_min_time=1   (GRADUS_BENCH_THREADS, default 2)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>

#include "gradus/gradus.h"

namespace {

using gradus::Tensor;

void run(benchmark::State& state, bool fused) {
  const char* threads = std::getenv("GRADUS_BENCH_THREADS");
  gradus::set_num_threads(threads != nullptr ? std::atoi(threads) : 2);
  gradus::manual_seed(static_cast<uint64_t>(std::random_device{}()));
  const gradus::Shape shape{4, 256, 704};
  Tensor gate = gradus::randn(shape).set_requires_grad(true);
  Tensor up = gradus::randn(shape).set_requires_grad(true);
  const Tensor grad = gradus::randn(shape);
  for (auto _ : state) {
    gate.set_grad(Tensor());
    up.set_grad(Tensor());
    const Tensor y = fused ? gradus::swiglu(gate, up) : gradus::mul(gradus::silu(gate), up);
    y.backward(grad);
    benchmark::DoNotOptimize(up.grad().data_ptr<float>());
  }
  state.SetItemsProcessed(state.iterations() * gate.numel());
}

void BM_swiglu_fused(benchmark::State& state) {
  run(state, true);
}
void BM_swiglu_silu_then_mul(benchmark::State& state) {
  run(state, false);
}

}  // namespace

BENCHMARK(BM_swiglu_fused)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_swiglu_silu_then_mul)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
