// The profiler on a training loop, and what recording costs: the same MLP step timed with the
// profiler off and on (alternating blocks, medians), divided by the events each step records.
//
//   example_profiler_overhead [steps=200] [trace.json]
//
// Prints one JSON line; with a second argument, also writes the trace of the last profiled step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "gradus/gradus.h"
#include "gradus/monitor/profiler.h"

using namespace gradus;

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 200;
  manual_seed(0);
  // `gradus bench --model mlp`'s model and batch: 784-128-64-10 (mlp-bench), batch 100.
  auto model = nn::make_model("mlp-bench");
  optim::Adam optimizer(model->parameters());
  const Tensor x = randn({100, 1, 28, 28});
  const Tensor y = randint(0, 10, {100});
  auto step = [&] {
    optimizer.zero_grad();
    Tensor loss = cross_entropy((*model)(x), y);
    loss.backward();
    optimizer.step();
  };
  auto time_block = [&](int n) {
    std::vector<double> ms;
    for (int i = 0; i < n; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      step();
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return ms;
  };
  time_block(20);                         // warm-up
  if (!monitor::Profiler::available()) {  // a -DGRADUS_PROFILER=OFF build: the baseline only
    std::vector<double> ms;
    for (int block = 0; block < 10; ++block) {
      for (double t : time_block(steps / 10)) ms.push_back(t);
    }
    std::printf("{\"model\":\"mlp-bench\",\"batch\":100,\"steps\":%d,\"compiled_out_ms\":%.4f}\n",
                steps, median(ms));
    return 0;
  }
  std::vector<double> off, on;
  size_t events = 0;
  int profiled_steps = 0;
  monitor::Profile last;
  // Alternating blocks, so drift in the machine's load hits both sides alike.
  for (int block = 0; block < 10; ++block) {
    for (double t : time_block(steps / 10)) off.push_back(t);
    monitor::Profiler prof;
    for (double t : time_block(steps / 10)) {
      on.push_back(t);
      prof.step();
    }
    last = prof.stop();
    events += last.num_events();
    profiled_steps += steps / 10;
  }
  // The cost of one event without the noise of a whole step: a one-element add, 200k times.
  const Tensor a = ones({1}), b = ones({1});
  auto time_adds = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200000; ++i) (void)add(a, b);
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
           200000;
  };
  std::vector<double> add_off, add_on;
  size_t add_events = 0;
  for (int block = 0; block < 5; ++block) {
    add_off.push_back(time_adds());
    monitor::Profiler prof;
    add_on.push_back(time_adds());
    add_events += prof.stop().num_events();
  }
  const double events_per_step = static_cast<double>(events) / std::max(profiled_steps, 1);
  const double off_ms = median(off), on_ms = median(on);
  std::printf(
      "{\"model\":\"mlp-bench\",\"batch\":100,\"steps\":%d,\"off_ms\":%.4f,\"on_ms\":%.4f,"
      "\"events_per_step\":%.1f,\"ns_per_event\":%.1f,\"add_off_ns\":%.1f,\"add_on_ns\":%.1f,"
      "\"events_per_add\":%.2f}\n",
      steps, off_ms, on_ms, events_per_step, (on_ms - off_ms) * 1e6 / events_per_step,
      median(add_off), median(add_on), static_cast<double>(add_events) / (5 * 200000.0));
  if (argc > 2) last.write_chrome_trace(argv[2]);
  return 0;
}
