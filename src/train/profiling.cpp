#include "gradus/train/profiling.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "gradus/core/error.h"

namespace gradus::train {

std::unique_ptr<monitor::DeviceMonitor> make_device_monitor(const Device& device,
                                                            std::chrono::milliseconds interval) {
  monitor::DeviceMonitor::Options options{.interval = interval, .nvml = device.is_cuda()};
  if (device.is_cuda() && std::getenv("CUDA_VISIBLE_DEVICES") == nullptr) {
    options.gpus = {device.index()};
    try {
      return std::make_unique<monitor::DeviceMonitor>(options);
    } catch (const Error&) {
      options.gpus.clear();  // NVML counts fewer GPUs than CUDA (or none): watch what it sees
    }
  }
  return std::make_unique<monitor::DeviceMonitor>(options);
}

StepProfiler::StepProfiler(ProfileOptions options, bool write, Device device, std::string who)
    : options_(std::move(options)), device_(device), who_(std::move(who)) {
  if (options_.trace.empty()) return;
  GRADUS_CHECK(options_.first_step >= 1 && options_.last_step >= options_.first_step, ValueError,
               who_, ": profile steps ", options_.first_step, " to ", options_.last_step,
               ": steps count from 1 and the last is not before the first");
  GRADUS_CHECK(monitor::Profiler::available(), ValueError, who_,
               ": this build of gradus has the profiler compiled out (configured with "
               "-DGRADUS_PROFILER=OFF)");
  enabled_ = write;  // other ranks: only one profiles
}

StepProfiler::~StepProfiler() = default;

void StepProfiler::at_step(int64_t completed) {
  if (!enabled_ || done_) return;
  if (profiler_) {
    profiler_->step();
    ++recorded_steps_;
    if (completed >= options_.last_step) report();
  } else if (completed == options_.first_step - 1) {
    // A few steps only: the shapes' formatting is affordable, and they make the trace readable.
    // The monitor's readings become counter tracks (GPU utilisation, memory and power, or the
    // process's CPU and RSS) next to the ops.
    monitor_ = make_device_monitor(device_, std::chrono::milliseconds(50));
    profiler_ = std::make_unique<monitor::Profiler>(
        monitor::ProfilerOptions{.record_shapes = true, .monitor = monitor_.get()});
  }
}

void StepProfiler::finish() {
  if (!enabled_ || done_) return;
  if (!profiler_) {
    std::fprintf(stderr,
                 "%s: warning: profile: training ended before step %lld; no trace written\n",
                 who_.c_str(), static_cast<long long>(options_.first_step));
    done_ = true;
    return;
  }
  report();
}

void StepProfiler::report() {
  done_ = true;
  monitor_->sample_now();  // a reading at the end, however short the profiled steps were
  const monitor::Profile profile = profiler_->stop();
  profiler_.reset();
  monitor_.reset();
  profile.write_chrome_trace(options_.trace);
  std::fprintf(stderr,
               "%s: profile of steps %lld-%lld (%zu events, %zu monitor counter values) written to "
               "%s\n%s",
               who_.c_str(), static_cast<long long>(options_.first_step),
               static_cast<long long>(options_.first_step + recorded_steps_ - 1),
               profile.num_events(), profile.counters().size(), options_.trace.c_str(),
               profile.table().c_str());
}

}  // namespace gradus::train
