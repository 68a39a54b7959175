// Watching and profiling a training run: the device monitor a run's reports read, and a profile
// of chosen steps (the Trainer's TrainerOptions::profile; a hand-written loop can drive a
// StepProfiler itself).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "gradus/core/device.h"
#include "gradus/monitor/monitor.h"
#include "gradus/monitor/profiler.h"

namespace gradus::train {

// Watches the host (process CPU and RSS, RAPL when readable) and, when `device` is a GPU, the
// GPUs through NVML: the device's own when CUDA_VISIBLE_DEVICES does not renumber them (CUDA and
// NVML then count alike), else every GPU NVML sees. Never throws for a missing driver.
std::unique_ptr<monitor::DeviceMonitor> make_device_monitor(const Device& device,
                                                            std::chrono::milliseconds interval);

struct ProfileOptions {
  std::string trace;  // the Chrome trace to write ("": no profile)
  // Steps first to last (1-based, inclusive); the default skips the warm-up (first-touch
  // allocations, BLAS buffers, caches).
  int64_t first_step = 3, last_step = 5;
};

// Records steps first to last with the profiler (tensor shapes, and a device monitor's readings
// every 50 ms as counter tracks), then writes the trace and prints the summary table to stderr.
class StepProfiler {
 public:
  // Inactive without a trace or when `write` is false (the other ranks of a run). ValueError for
  // a bad step range or a build without the profiler.
  StepProfiler(ProfileOptions options, bool write, Device device, std::string who = "train");
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Call with the number of steps completed: before the first step, then after each one. Starts
  // recording after step first - 1 (so step first's data loading is in it), marks each step, and
  // after step last stops and reports.
  void at_step(int64_t completed);
  // Training ended: reports what was recorded if step last was never reached (a warning when
  // nothing was).
  void finish();

 private:
  void report();

  ProfileOptions options_;
  Device device_;
  std::string who_;
  bool enabled_ = false;
  bool done_ = false;
  int64_t recorded_steps_ = 0;
  std::unique_ptr<monitor::DeviceMonitor> monitor_;  // declared first: outlives profiler_
  std::unique_ptr<monitor::Profiler> profiler_;
};

}  // namespace gradus::train
