// Step timing shared by the bench commands (bench.cpp, bench_dist.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

namespace gradus::cli {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// 0 for no values.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Calls step() `warmup` times untimed, then `repeats` x `steps` times, and returns each timed
// call's wall time in ms. step must wait for its device work (read a value back) so that a time is
// the step's whole latency.
// `timed_start` runs once between the warm-up and the timed calls (e.g. to start an energy window).
template <typename Step, typename Start>
std::vector<double> time_steps(int warmup, int steps, int repeats, Step&& step,
                               Start&& timed_start) {
  for (int i = 0; i < warmup; ++i) step();
  timed_start();
  std::vector<double> times;
  times.reserve(static_cast<size_t>(steps) * static_cast<size_t>(std::max(repeats, 0)));
  for (int r = 0; r < repeats; ++r) {
    for (int s = 0; s < steps; ++s) {
      const auto t0 = Clock::now();
      step();
      times.push_back(ms_since(t0));
    }
  }
  return times;
}

template <typename Step>
std::vector<double> time_steps(int warmup, int steps, int repeats, Step&& step) {
  return time_steps(warmup, steps, repeats, std::forward<Step>(step), [] {});
}

}  // namespace gradus::cli
