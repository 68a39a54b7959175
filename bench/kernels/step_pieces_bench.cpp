// The pieces of the CPU Llama benchmark's training step besides its GEMMs and attention, at that
// benchmark's shapes (width 256, SwiGLU width 704, 8 heads and 2 key/value heads of 32, batch 4 x
// context 256 tokens, vocabulary 65, float32): gradient clipping over the model's 39 gradients,
// AdamW's update of them, and RMSNorm forward + backward.
//   build/bench/kernels/bench_step_pieces --benchmark_min_time=1   (GRADUS_BENCH_THREADS, default
//   2)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>

#include "gradus/gradus.h"

namespace {

using gradus::Tensor;

void setup() {
  const char* threads = std::getenv("GRADUS_BENCH_THREADS");
  gradus::set_num_threads(threads != nullptr ? std::atoi(threads) : 2);
  gradus::manual_seed(static_cast<uint64_t>(std::random_device{}()));
}

// The Llama's parameters (4 layers), each with a random gradient.
std::vector<Tensor> llama_parameters() {
  std::vector<gradus::Shape> shapes{{65, 256}, {256}, {65, 256}};
  for (int layer = 0; layer < 4; ++layer) {
    for (const gradus::Shape& s : std::vector<gradus::Shape>{{256},
                                                             {256, 256},
                                                             {64, 256},
                                                             {64, 256},
                                                             {256, 256},
                                                             {256},
                                                             {704, 256},
                                                             {704, 256},
                                                             {256, 704}}) {
      shapes.push_back(s);
    }
  }
  std::vector<Tensor> params;
  for (const gradus::Shape& s : shapes) {
    Tensor p = gradus::randn(s).set_requires_grad(true);
    p.set_grad(gradus::randn(s));
    params.push_back(p);
  }
  return params;
}

void BM_clip_grad_norm(benchmark::State& state) {
  setup();
  const std::vector<Tensor> params = llama_parameters();
  for (auto _ : state) {
    // max_norm large enough that the gradients keep their size across iterations, but below the
    // norm, so the scaling really runs.
    benchmark::DoNotOptimize(gradus::optim::clip_grad_norm(params, 1e3).item());
  }
}

void BM_adamw_step(benchmark::State& state) {
  setup();
  const std::vector<Tensor> params = llama_parameters();
  gradus::optim::AdamW opt(params, {.lr = 1e-4});
  for (auto _ : state) opt.step();
}

void BM_rms_norm(benchmark::State& state) {
  setup();
  Tensor x = gradus::randn({4, 256, 256}).set_requires_grad(true);
  Tensor w = gradus::randn({256}).set_requires_grad(true);
  const Tensor grad = gradus::randn({4, 256, 256});
  for (auto _ : state) {
    x.set_grad(Tensor());
    w.set_grad(Tensor());
    gradus::rms_norm(x, {256}, w, 1e-5).backward(grad);
    benchmark::DoNotOptimize(w.grad().data_ptr<float>());
  }
}

}  // namespace

BENCHMARK(BM_clip_grad_norm)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_adamw_step)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_rms_norm)->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_MAIN();
