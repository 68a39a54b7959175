// `gradus train --profile trace.json [--profile-steps A:B]`: profiles training steps A to B and
// writes their Chrome trace, then prints the summary table (gradus::monitor::Profiler).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gradus/core/device.h"

namespace CLI {
class App;
}

namespace gradus::monitor {
class DeviceMonitor;
class Profiler;
}  // namespace gradus::monitor

namespace gradus::cli {

struct TrainOptions;

// Adds --profile and --profile-steps to `gradus train`.
void add_profile_options(CLI::App& train, TrainOptions& o);

// Steps A to B (1-based, inclusive) of the run; "" gives the default, a few steps after warm-up.
struct StepRange {
  int64_t first = 0, last = 0;
};
StepRange parse_step_range(const std::string& text);

// Drives the profiler from a training loop. Built before training: it checks the range and that
// the trace can be written, so a typo fails at once rather than after the steps it waited for.
class TrainingProfiler {
 public:
  // Inactive when path is empty or on a rank other than the lead (`write` false). While it
  // records, a DeviceMonitor reads `device` (NVML for a GPU, the process otherwise) every 50 ms
  // for the trace's counter tracks.
  TrainingProfiler(const std::string& path, const std::string& steps, bool write,
                   const Device& device);
  ~TrainingProfiler();
  TrainingProfiler(const TrainingProfiler&) = delete;
  TrainingProfiler& operator=(const TrainingProfiler&) = delete;

  // Call with the number of steps completed: before the first step, then after each one. Starts
  // recording after step first-1 (so step A's data loading is in it), marks each profiled step,
  // and after step B stops and reports.
  void at_step(int64_t completed);
  // Training ended: reports what was recorded if step B was never reached.
  void finish();

 private:
  void report();

  std::string path_;
  StepRange range_;
  bool enabled_ = false;
  bool done_ = false;
  int64_t recorded_steps_ = 0;
  Device device_;
  std::unique_ptr<monitor::DeviceMonitor> monitor_;  // declared first: outlives profiler_
  std::unique_ptr<monitor::Profiler> profiler_;
};

}  // namespace gradus::cli
