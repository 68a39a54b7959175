// conv2d forward / backward-data / backward-weight for the small CNN's two conv layers at batch 64
// (float32), timed through the CPU backend directly. Compare with conv_bench_torch.py, which times
// the same convolutions in PyTorch with the same thread count:
//   build-*/bench/kernels/bench_conv --benchmark_min_time=1   (GRADUS_BENCH_THREADS, default 2)
//   python3 bench/kernels/conv_bench_torch.py
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>

#include "backend/backend.h"
#include "gradus/gradus.h"

namespace {

using gradus::Tensor;

struct Layer {
  int64_t c, o, hw;
};
// conv 1->32 3x3 pad 1 on 28x28, and conv 32->64 3x3 pad 1 on 14x14 (after a 2x2 max pool).
constexpr Layer kLayers[] = {{1, 32, 28}, {32, 64, 14}};
constexpr int64_t kBatch = 64;

Tensor random_tensor(const gradus::Shape& shape, std::mt19937& rng) {
  Tensor t = gradus::empty(shape, {gradus::DType::f32, gradus::Device::cpu()});
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = d(rng);
  return t;
}

struct Setup {
  Tensor x, w, b, y, gy, gx, gw, gb;
  gradus::backend::Conv2dArgs args;
  explicit Setup(const Layer& l) {
    std::mt19937 rng(std::random_device{}());
    x = random_tensor({kBatch, l.c, l.hw, l.hw}, rng);
    w = random_tensor({l.o, l.c, 3, 3}, rng);
    b = random_tensor({l.o}, rng);
    y = random_tensor({kBatch, l.o, l.hw, l.hw}, rng);
    gy = random_tensor({kBatch, l.o, l.hw, l.hw}, rng);
    gx = random_tensor(x.sizes(), rng);
    gw = random_tensor(w.sizes(), rng);
    gb = random_tensor(b.sizes(), rng);
    args.pad_h = args.pad_w = 1;
  }
};

gradus::backend::Backend& cpu() {
  return gradus::backend::backend_for(gradus::DeviceType::CPU);
}

void set_flops(benchmark::State& state, const Layer& l) {
  const double flops = 2.0 * kBatch * l.o * l.hw * l.hw * l.c * 9;
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_conv_forward(benchmark::State& state) {
  const Layer& l = kLayers[state.range(0)];
  Setup s(l);
  for (auto _ : state) cpu().conv2d(s.x, s.w, s.b, s.y, s.args);
  set_flops(state, l);
}

void BM_conv_backward_data(benchmark::State& state) {
  const Layer& l = kLayers[state.range(0)];
  Setup s(l);
  for (auto _ : state) cpu().conv2d_backward_data(s.gy, s.w, s.gx, s.args);
  set_flops(state, l);
}

void BM_conv_backward_weight(benchmark::State& state) {  // weight and bias gradients
  const Layer& l = kLayers[state.range(0)];
  Setup s(l);
  for (auto _ : state) cpu().conv2d_backward_weight(s.gy, s.x, s.gw, s.gb, s.args);
  set_flops(state, l);
}

BENCHMARK(BM_conv_forward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_conv_backward_data)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_conv_backward_weight)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  const char* env = std::getenv("GRADUS_BENCH_THREADS");
  gradus::set_num_threads(env ? std::atoi(env) : 2);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("threads", std::to_string(gradus::get_num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
