// The fused causal attention, forward + backward, at the Llama CPU benchmark's shape (q, k, v
// [4, 8, 256, 32] float32: batch 4, 8 heads, context 256, head size 32) and at the GPT's (head
// size 64). GRADUS_ATTENTION_ISA=base runs the tiles on BLAS instead of the AVX-512 kernel.
//   build/bench/kernels/bench_attention --benchmark_min_time=1   (GRADUS_BENCH_THREADS, default 2)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>

#include "gradus/gradus.h"

namespace {

using gradus::Tensor;

void run(benchmark::State& state, int64_t head_size) {
  const char* threads = std::getenv("GRADUS_BENCH_THREADS");
  gradus::set_num_threads(threads != nullptr ? std::atoi(threads) : 2);
  gradus::manual_seed(static_cast<uint64_t>(std::random_device{}()));
  const int64_t heads = 256 / head_size;
  const gradus::Shape shape{4, heads, 256, head_size};
  Tensor q = gradus::randn(shape).set_requires_grad(true);
  Tensor k = gradus::randn(shape).set_requires_grad(true);
  Tensor v = gradus::randn(shape).set_requires_grad(true);
  const Tensor grad = gradus::randn(shape);
  gradus::AttentionOptions options;
  options.causal = true;
  for (auto _ : state) {
    for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    const Tensor y = gradus::scaled_dot_product_attention(q, k, v, options);
    y.backward(grad);
    benchmark::DoNotOptimize(v.grad().data_ptr<float>());
  }
  state.SetItemsProcessed(state.iterations() * q.numel());
}

void BM_attention_head32(benchmark::State& state) {
  run(state, 32);
}
void BM_attention_head64(benchmark::State& state) {
  run(state, 64);
}

}  // namespace

BENCHMARK(BM_attention_head32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_attention_head64)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
