// Profiler: starts/stops the recording session of gradus/core/profiling.h, marks steps, polls an
// attached DeviceMonitor for counter tracks; Profile: the summary table (the trace is in
// profiler_trace.cpp).
#include "gradus/monitor/profiler.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gradus/core/error.h"
#include "gradus/monitor/monitor.h"
#include "monitor/profiler_internal.h"

namespace gradus::monitor {

// ------------------------------------------------------------------------------ Poller
// Copies the monitor's readings into counter samples as they appear. The monitor reads on its
// own thread; polling latest() never waits for NVML.
struct Profiler::Poller {
  DeviceMonitor* monitor = nullptr;
  std::mutex mu;
  std::condition_variable wake;
  bool stop = false;
  int64_t last_number = -1;
  std::vector<CounterSample> samples;
  std::thread thread;

  void take() {
    const Snapshot s = monitor->latest();
    if (s.number == last_number) return;
    last_number = s.number;
    const int64_t t = profiling::now_ns();
    auto add = [&](const char* name, const std::string& series, double v) {
      samples.push_back({t, name, series, v});
    };
    for (const GpuSample& g : s.gpus) {
      const std::string series = "gpu" + std::to_string(g.index);
      if (g.util_percent) add("GPU utilization (%)", series, *g.util_percent);
      if (g.memory_used_bytes) add("GPU memory (MiB)", series, *g.memory_used_bytes / 1048576.0);
      if (g.power_w) add("GPU power (W)", series, *g.power_w);
    }
    if (s.cpu.process_util_percent) {
      add("CPU utilization (%)", "process", *s.cpu.process_util_percent);
    }
    if (s.cpu.system_util_percent) add("CPU utilization (%)", "system", *s.cpu.system_util_percent);
    if (s.cpu.rss_bytes) add("RSS (MiB)", "process", *s.cpu.rss_bytes / 1048576.0);
    if (s.cpu.package_power_w) add("CPU power (W)", "packages", *s.cpu.package_power_w);
  }
};

Profiler::Profiler(ProfilerOptions options) : options_(options) {
  GRADUS_CHECK(profiling::compiled_in(), ValueError,
               "profiler: this build of gradus has the profiler compiled out (configured with "
               "-DGRADUS_PROFILER=OFF)");
  profiling::start_session({.record_shapes = options.record_shapes,
                            .device_time = options.device_time,
                            .nvtx = options.nvtx});
  running_ = true;
  last_mark_ns_ = profiling::now_ns();
  if (options_.monitor != nullptr) {
    poller_ = std::make_unique<Poller>();
    poller_->monitor = options_.monitor;
    poller_->take();
    poller_->thread = std::thread([this] { poll_monitor(); });
  }
}

Profiler::~Profiler() {
  if (running_) {
    try {
      stop();
    } catch (...) {
    }
  }
}

void Profiler::poll_monitor() {
  std::unique_lock<std::mutex> lock(poller_->mu);
  while (!poller_->stop) {
    poller_->wake.wait_for(lock, std::chrono::milliseconds(20));
    if (!poller_->stop) poller_->take();
  }
}

void Profiler::step() {
  GRADUS_CHECK(running_, ValueError, "profiler: step() after stop()");
  const int64_t now = profiling::now_ns();
  steps_.push_back({last_mark_ns_, now, profiling::current_thread_id()});
  last_mark_ns_ = now;
}

Profile Profiler::stop() {
  GRADUS_CHECK(running_, ValueError, "profiler: stop() called twice");
  running_ = false;
  std::vector<CounterSample> counters;
  if (poller_) {
    {
      std::lock_guard<std::mutex> lock(poller_->mu);
      poller_->stop = true;
    }
    poller_->wake.notify_all();
    poller_->thread.join();
    poller_->take();  // the reading current at the end
    counters = std::move(poller_->samples);
    poller_.reset();
  }
  return Profile(profiling::stop_session(), std::move(steps_), std::move(counters));
}

// ------------------------------------------------------------------------------ Profile
Profile::Profile(profiling::SessionResult session, std::vector<StepSpan> steps,
                 std::vector<CounterSample> counters)
    : session_(std::move(session)), steps_(std::move(steps)), counters_(std::move(counters)) {
  for (auto& t : session_.threads) detail::sort_for_nesting(t.events);
}

double Profile::step_time_us() const {
  int64_t ns = 0;
  for (const StepSpan& s : steps_) ns += s.end_ns - s.start_ns;
  if (steps_.empty()) ns = session_.stop_ns - session_.start_ns;
  return static_cast<double>(ns) / 1e3;
}

size_t Profile::num_events() const {
  size_t n = 0;
  for (const auto& t : session_.threads) n += t.events.size();
  return n;
}

std::vector<OpStats> Profile::key_averages() const {
  std::map<std::pair<std::string, profiling::Activity>, OpStats> rows;
  for (const auto& t : session_.threads) {
    const std::vector<int64_t> child_ns = detail::child_time_ns(t.events);
    for (size_t i = 0; i < t.events.size(); ++i) {
      const profiling::Event& e = t.events[i];
      OpStats& r = rows[{e.name, e.kind}];
      if (r.calls == 0) {
        r.name = e.name;
        r.category = profiling::activity_name(e.kind);
      }
      ++r.calls;
      const int64_t dur = e.end_ns - e.start_ns;
      r.total_us += static_cast<double>(dur) / 1e3;
      r.self_us += static_cast<double>(dur - child_ns[i]) / 1e3;
      if (const auto d = detail::device_span(session_, e)) {
        r.device_us += static_cast<double>(d->second - d->first) / 1e3;
      }
    }
  }
  const double step_us = step_time_us();
  std::vector<OpStats> out;
  for (auto& [key, r] : rows) {
    r.percent = step_us > 0 ? 100.0 * r.total_us / step_us : 0;
    out.push_back(r);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const OpStats& a, const OpStats& b) { return a.self_us > b.self_us; });
  return out;
}

namespace {
std::string format_us(double us) {
  char buf[32];
  if (us >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3f s", us / 1e6);
  } else if (us >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.3f ms", us / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f us", us);
  }
  return buf;
}
}  // namespace

std::string Profile::table(size_t max_rows) const {
  const std::vector<OpStats> rows = key_averages();
  size_t width = 4;
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    width = std::max(width, rows[i].name.size());
  }
  width = std::min<size_t>(width, 48);
  std::ostringstream os;
  char line[256];
  std::snprintf(line, sizeof line, "%-*s  %-9s %7s %12s %12s %12s %9s\n", static_cast<int>(width),
                "Name", "Category", "Calls", "Total CPU", "Self CPU", "GPU time", "% of step");
  os << line << std::string(width + 69, '-') << "\n";
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    const OpStats& r = rows[i];
    const std::string gpu = has_device_time() ? format_us(r.device_us) : "-";
    std::snprintf(line, sizeof line, "%-*.*s  %-9s %7lld %12s %12s %12s %8.1f%%\n",
                  static_cast<int>(width), static_cast<int>(width), r.name.c_str(),
                  r.category.c_str(), static_cast<long long>(r.calls),
                  format_us(r.total_us).c_str(), format_us(r.self_us).c_str(), gpu.c_str(),
                  r.percent);
    os << line;
  }
  if (rows.size() > max_rows) os << "... " << rows.size() - max_rows << " more\n";
  std::snprintf(line, sizeof line, "%zu steps, %s per step, %zu events\n", steps_.size(),
                format_us(steps_.empty() ? step_time_us() : step_time_us() / steps_.size()).c_str(),
                num_events());
  os << line;
  return os.str();
}

std::string Profile::summary_json() const {
  nlohmann::ordered_json j;
  j["steps"] = steps_.size();
  j["step_time_us"] = step_time_us();
  j["device_time"] = has_device_time();
  nlohmann::ordered_json ops = nlohmann::ordered_json::array();
  for (const OpStats& r : key_averages()) {
    ops.push_back({{"name", r.name},
                   {"category", r.category},
                   {"calls", r.calls},
                   {"total_us", r.total_us},
                   {"self_us", r.self_us},
                   {"device_us", r.device_us},
                   {"percent", r.percent}});
  }
  j["ops"] = std::move(ops);
  return j.dump();
}

}  // namespace gradus::monitor
