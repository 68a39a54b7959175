// The fused causal attention, forward + backward, at the Llama CPU benchmark's shape (q, k, v
// [4, 8, 256, 32] float32: batch 4, 8 heads, context 256, head size 32) and at the GPT's (head
// size 64); the Llama's own, with 2 key/value heads read in place (enable_gqa), forward alone and
// forward + backward. GRADUS_ATTENTION_ISA=base runs the tiles on BLAS instead of the AVX-512
// kernel.
//   build/bench/kernels/bench_attention --benchmark_min_time=1   (GRADUS_BENCH_THREADS, default 2)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>

#include "gradus/gradus.h"

namespace {

using gradus::Tensor;

void run(benchmark::State& state, int64_t head_size, int64_t kv_heads = 0, bool backward = true) {
  const char* threads = std::getenv("GRADUS_BENCH_THREADS");
  gradus::set_num_threads(threads != nullptr ? std::atoi(threads) : 2);
  gradus::manual_seed(static_cast<uint64_t>(std::random_device{}()));
  const int64_t heads = 256 / head_size;
  const gradus::Shape shape{4, heads, 256, head_size};
  const gradus::Shape kv_shape{4, kv_heads > 0 ? kv_heads : heads, 256, head_size};
  Tensor q = gradus::randn(shape).set_requires_grad(backward);
  Tensor k = gradus::randn(kv_shape).set_requires_grad(backward);
  Tensor v = gradus::randn(kv_shape).set_requires_grad(backward);
  const Tensor grad = gradus::randn(shape);
  gradus::AttentionOptions options;
  options.causal = true;
  options.enable_gqa = kv_heads > 0;
  for (auto _ : state) {
    for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    const Tensor y = gradus::scaled_dot_product_attention(q, k, v, options);
    if (backward) {
      y.backward(grad);
      benchmark::DoNotOptimize(v.grad().data_ptr<float>());
    } else {
      benchmark::DoNotOptimize(y.data_ptr<float>());
    }
  }
  state.SetItemsProcessed(state.iterations() * q.numel());
}

void BM_attention_head32(benchmark::State& state) {
  run(state, 32);
}
void BM_attention_head64(benchmark::State& state) {
  run(state, 64);
}
void BM_attention_head32_kv2(benchmark::State& state) {
  run(state, 32, 2);
}
void BM_attention_head32_kv2_forward(benchmark::State& state) {
  run(state, 32, 2, false);
}

}  // namespace

BENCHMARK(BM_attention_head32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_attention_head64)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_attention_head32_kv2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_attention_head32_kv2_forward)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
