// gradus::monitor::Profiler: records what training spends its time on — every op's forward (with
// or without autograd), every backward node, optimizer steps, data loading, host/device copies
// and collectives — per thread, with device time from CUDA events on a GPU build, and turns it
// into a Chrome trace (Perfetto, chrome://tracing) and a torch.profiler-like summary table.
//
//   monitor::Profiler prof({.record_shapes = true});
//   for (...) { train_step(); prof.step(); }
//   monitor::Profile p = prof.stop();
//   p.write_chrome_trace("trace.json");
//   std::cout << p.table();
//
// Recording is off until a Profiler is made, and then costs a few tens of ns per scope (see
// docs/performance.md). One Profiler at a time per process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gradus/core/profiling.h"

namespace gradus::monitor {

class DeviceMonitor;

struct ProfilerOptions {
  bool record_shapes =
      false;                // input/output shapes, dtypes and bytes of each op (args in the trace)
  bool device_time = true;  // CUDA events around each scope (GPU builds with a GPU)
  bool nvtx = true;         // NVTX ranges too (builds that found the NVTX header)
  // Readings of this monitor become counter tracks in the trace (not owned; must outlive stop()).
  DeviceMonitor* monitor = nullptr;
};

// One row of the summary: all events of one name and activity.
struct OpStats {
  std::string name;
  std::string category;  // profiling::activity_name
  int64_t calls = 0;
  double total_us = 0;   // wall time, children included
  double self_us = 0;    // minus the time in scopes nested in it on the same thread
  double device_us = 0;  // GPU time between its CUDA events (0 without)
  double percent = 0;    // total_us / the profiled steps' wall time
};

struct CounterSample {
  int64_t time_ns = 0;  // steady_clock
  std::string name;     // "GPU utilization (%)"
  std::string series;   // "gpu0", "process"
  double value = 0;
};

struct StepSpan {
  int64_t start_ns = 0, end_ns = 0;
  uint32_t tid = 0;  // the thread that called step()
};

// A finished recording.
class Profile {
 public:
  Profile() = default;
  Profile(profiling::SessionResult session, std::vector<StepSpan> steps,
          std::vector<CounterSample> counters);

  // {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}: complete events ("X")
  // per thread (pid 1), communication (pid 2), GPU streams (pid 3), counters ("C", pid 4), with
  // process_name / thread_name metadata. Times in microseconds from the start of the recording.
  std::string chrome_trace_json() const;
  // Throws IOError naming the path when it cannot be written.
  void write_chrome_trace(const std::string& path) const;

  // Rows sorted by self time, largest first (the profiled steps themselves are not rows).
  std::vector<OpStats> key_averages() const;
  // The rows as a fixed-width text table (at most max_rows, then "... N more").
  std::string table(size_t max_rows = 100) const;
  // {"steps": N, "step_time_us": ..., "ops": [{name, category, calls, total_us, self_us,
  // device_us, percent}, ...]}
  std::string summary_json() const;

  const std::vector<profiling::ThreadEvents>& threads() const { return session_.threads; }
  const std::vector<StepSpan>& steps() const { return steps_; }
  const std::vector<CounterSample>& counters() const { return counters_; }
  // The profiled steps' summed wall time; the whole recording when step() was never called.
  double step_time_us() const;
  size_t num_events() const;
  bool has_device_time() const { return session_.device_time; }

 private:
  profiling::SessionResult session_;
  std::vector<StepSpan> steps_;
  std::vector<CounterSample> counters_;
};

class Profiler {
 public:
  // Starts recording. Throws ValueError when another Profiler is recording, and when this build
  // has the hooks compiled out (-DGRADUS_PROFILER=OFF).
  explicit Profiler(ProfilerOptions options = {});
  ~Profiler();  // stops (discarding the events) if stop() was not called
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Ends one training step: the time since the previous step() (or the start) becomes the span
  // "ProfilerStep#N" on the calling thread's track, and the denominator of the % column.
  void step();
  Profile stop();
  bool running() const { return running_; }

  // Whether the hooks are compiled in (GRADUS_PROFILER).
  static bool available() { return profiling::compiled_in(); }

 private:
  void poll_monitor();

  ProfilerOptions options_;
  bool running_ = false;
  int64_t last_mark_ns_ = 0;
  std::vector<StepSpan> steps_;
  struct Poller;  // profiler.cpp
  std::unique_ptr<Poller> poller_;
};

}  // namespace gradus::monitor
