#include "gradus/monitor/monitor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "gradus/core/error.h"

namespace gradus::monitor {

namespace {

template <typename T>
void raise_peak(std::optional<T>& peak, const std::optional<T>& v) {
  if (v && (!peak || *v > *peak)) peak = v;
}

// Metrics lines are read by people and plotted: three decimals are more than any reading holds.
double rounded(double v) {
  return std::round(v * 1000.0) / 1000.0;
}

}  // namespace

// Running sums over one window; `start` is the reading before the window's first.
struct DeviceMonitor::Accumulator {
  struct Gpu {
    double util_sum = 0;
    int64_t util_count = 0;
    std::optional<double> util_peak, power_peak;
    std::optional<uint64_t> memory_peak;
    double integral_j = 0;
    bool integrated = false;  // at least one interval had power at both ends
  };
  Snapshot start, last;
  int64_t samples = 0;
  std::vector<Gpu> gpus;
  double cpu_sum = 0, process_sum = 0;
  int64_t cpu_count = 0, process_count = 0;
  std::optional<uint64_t> rss_peak;

  explicit Accumulator(const Snapshot& from) : start(from), last(from), gpus(from.gpus.size()) {}

  void add(const Snapshot& s) {
    for (size_t i = 0; i < gpus.size() && i < s.gpus.size(); ++i) {
      Gpu& g = gpus[i];
      const GpuSample& now = s.gpus[i];
      if (now.util_percent) {
        g.util_sum += *now.util_percent;
        ++g.util_count;
      }
      raise_peak(g.util_peak, now.util_percent);
      raise_peak(g.power_peak, now.power_w);
      raise_peak(g.memory_peak, now.memory_used_bytes);
      const std::optional<double>& before = last.gpus[i].power_w;
      if (now.power_w && before) {  // trapezoid rule
        g.integral_j += 0.5 * (*before + *now.power_w) * (s.time_s - last.time_s);
        g.integrated = true;
      }
    }
    if (s.cpu.system_util_percent) {
      cpu_sum += *s.cpu.system_util_percent;
      ++cpu_count;
    }
    if (s.cpu.process_util_percent) {
      process_sum += *s.cpu.process_util_percent;
      ++process_count;
    }
    raise_peak(rss_peak, s.cpu.rss_bytes);
    last = s;
    ++samples;
  }

  Totals totals() const {
    Totals t;
    t.samples = samples;
    t.seconds = last.time_s - start.time_s;
    for (size_t i = 0; i < gpus.size(); ++i) {
      const Gpu& g = gpus[i];
      GpuTotals out;
      out.index = last.gpus[i].index;
      out.name = last.gpus[i].name;
      if (g.util_count > 0) out.mean_util_percent = g.util_sum / static_cast<double>(g.util_count);
      out.peak_util_percent = g.util_peak;
      out.peak_power_w = g.power_peak;
      out.peak_memory_used_bytes = g.memory_peak;
      const std::optional<double>& c0 = start.gpus[i].energy_counter_j;
      const std::optional<double>& c1 = last.gpus[i].energy_counter_j;
      if (c0 && c1 && *c1 >= *c0) {
        out.energy_j = *c1 - *c0;
        out.energy_from_counter = true;
      } else if (g.integrated) {
        out.energy_j = g.integral_j;
      }
      if (out.energy_j && t.seconds > 0) out.mean_power_w = *out.energy_j / t.seconds;
      t.gpus.push_back(out);
    }
    if (cpu_count > 0) t.mean_cpu_util_percent = cpu_sum / static_cast<double>(cpu_count);
    if (process_count > 0) {
      t.mean_process_cpu_percent = process_sum / static_cast<double>(process_count);
    }
    t.peak_rss_bytes = rss_peak;
    if (start.cpu.package_energy_j && last.cpu.package_energy_j) {
      t.cpu_energy_j = *last.cpu.package_energy_j - *start.cpu.package_energy_j;
    }
    return t;
  }
};

std::optional<double> Totals::gpu_energy_j() const {
  std::optional<double> sum;
  for (const GpuTotals& g : gpus) {
    if (g.energy_j) sum = sum.value_or(0) + *g.energy_j;
  }
  return sum;
}

double Totals::energy_j() const {
  return gpu_energy_j().value_or(0) + cpu_energy_j.value_or(0);
}

std::optional<double> Totals::measured_energy_j() const {
  const std::optional<double> gpu = gpu_energy_j();
  if (!gpu && !cpu_energy_j) return std::nullopt;
  return gpu.value_or(0) + cpu_energy_j.value_or(0);
}

std::string Totals::energy_source() const {
  bool counter = false, integral = false;
  for (const GpuTotals& g : gpus) {
    if (!g.energy_j) continue;
    (g.energy_from_counter ? counter : integral) = true;
  }
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (on) out += (out.empty() ? "" : "+") + std::string(name);
  };
  add(counter, "nvml-counter");
  add(integral, "nvml-power-integral");
  add(cpu_energy_j.has_value(), "rapl");
  return out;
}

std::string progress_text(const Snapshot& s) {
  char buf[128];
  if (!s.gpus.empty()) {
    double util = 0, power = 0;
    int utils = 0, powers = 0;
    uint64_t used = 0, total = 0;
    bool memory = false;
    for (const GpuSample& g : s.gpus) {
      if (g.util_percent) {
        util += *g.util_percent;
        ++utils;
      }
      if (g.power_w) {
        power += *g.power_w;
        ++powers;
      }
      if (g.memory_used_bytes && g.memory_total_bytes) {
        used += *g.memory_used_bytes;
        total += *g.memory_total_bytes;
        memory = true;
      }
    }
    std::string out = "GPU";
    if (utils > 0) {
      std::snprintf(buf, sizeof(buf), " %.0f%%", util / utils);
      out += buf;
    }
    if (memory) {
      constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
      std::snprintf(buf, sizeof(buf), " %.1f/%.1f GiB", static_cast<double>(used) / kGiB,
                    static_cast<double>(total) / kGiB);
      out += buf;
    }
    if (powers > 0) {
      std::snprintf(buf, sizeof(buf), " %.0f W", power);
      out += buf;
    }
    return out == "GPU" ? "" : out;
  }
  std::string out;
  if (s.cpu.process_util_percent) {
    std::snprintf(buf, sizeof(buf), "CPU %.0f%%", *s.cpu.process_util_percent);
    out += buf;
  }
  if (s.cpu.rss_bytes) {
    std::snprintf(buf, sizeof(buf), "%sRSS %.0f MiB", out.empty() ? "" : " ",
                  static_cast<double>(*s.cpu.rss_bytes) / (1024.0 * 1024.0));
    out += buf;
  }
  return out;
}

std::string Totals::to_json() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  double util_sum = 0, power_sum = 0;
  int util_count = 0, power_count = 0;
  std::optional<double> util_peak;
  std::optional<uint64_t> memory_peak;
  for (const GpuTotals& g : gpus) {
    if (g.mean_util_percent) {
      util_sum += *g.mean_util_percent;
      ++util_count;
    }
    if (g.mean_power_w) {
      power_sum += *g.mean_power_w;
      ++power_count;
    }
    raise_peak(util_peak, g.peak_util_percent);
    raise_peak(memory_peak, g.peak_memory_used_bytes);
  }
  if (util_count > 0) j["gpu_util_percent"] = rounded(util_sum / util_count);
  if (util_peak) j["gpu_util_peak_percent"] = rounded(*util_peak);
  if (memory_peak) j["gpu_memory_peak_bytes"] = *memory_peak;
  if (power_count > 0) j["gpu_power_w"] = rounded(power_sum);
  if (const auto e = gpu_energy_j()) j["gpu_energy_j"] = rounded(*e);
  if (mean_cpu_util_percent) j["cpu_util_percent"] = rounded(*mean_cpu_util_percent);
  if (mean_process_cpu_percent) j["process_cpu_percent"] = rounded(*mean_process_cpu_percent);
  if (peak_rss_bytes) j["rss_peak_bytes"] = *peak_rss_bytes;
  if (cpu_energy_j && seconds > 0) j["cpu_power_w"] = rounded(*cpu_energy_j / seconds);
  if (cpu_energy_j) j["cpu_energy_j"] = rounded(*cpu_energy_j);
  j["monitor_samples"] = samples;
  j["monitor_seconds"] = rounded(seconds);
  return j.dump();
}

DeviceMonitor::DeviceMonitor(Options options)
    : options_(std::move(options)), cpu_(options_.cpu), start_(std::chrono::steady_clock::now()) {
  GRADUS_CHECK(options_.interval.count() >= 0, ValueError,
               "DeviceMonitor: the interval must not be negative (got ", options_.interval.count(),
               " ms)");
  if (options_.nvml) {
    nvml_ = std::make_unique<Nvml>(options_.nvml_library);
    nvml_->set_read_pcie(options_.pcie);
    nvml_status_ = nvml_->status();
    for (int i : options_.gpus) {
      GRADUS_CHECK(!nvml_->available() || (i >= 0 && i < nvml_->device_count()), ValueError,
                   "DeviceMonitor: GPU ", i, " was requested but NVML sees ",
                   nvml_->device_count());
    }
    if (nvml_->available()) {
      gpu_indices_ = options_.gpus;
      if (gpu_indices_.empty()) {
        for (int i = 0; i < nvml_->device_count(); ++i) gpu_indices_.push_back(i);
      }
    }
  } else {
    nvml_status_ = "NVML not used";
  }
  latest_ = read();
  total_ = std::make_unique<Accumulator>(latest_);
  window_ = std::make_unique<Accumulator>(latest_);
  count_ = 1;
  if (options_.interval.count() > 0) thread_ = std::thread([this] { run(); });
}

DeviceMonitor::~DeviceMonitor() {
  stop();
}

void DeviceMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DeviceMonitor::run() {
  // Readings on a fixed grid (start + k * interval), so slow reads do not make the clock drift;
  // beats missed while a read was slow are skipped, not made up for.
  auto next = std::chrono::steady_clock::now() + options_.interval;
  std::unique_lock<std::mutex> lock(wake_mutex_);
  while (!wake_.wait_until(lock, next, [this] { return stopping_; })) {
    lock.unlock();
    try {
      sample_now();
    } catch (...) {  // a failed reading (out of memory) must not end the training process
    }
    lock.lock();
    next += options_.interval;
    const auto now = std::chrono::steady_clock::now();
    if (next < now) next = now + options_.interval;
  }
}

Snapshot DeviceMonitor::read() {
  Snapshot s;
  for (int i : gpu_indices_) s.gpus.push_back(nvml_->sample(i));
  s.cpu = cpu_.sample();
  s.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return s;
}

Snapshot DeviceMonitor::sample_now() {
  std::lock_guard<std::mutex> one_reader(sample_mutex_);
  Snapshot s = read();
  std::lock_guard<std::mutex> lock(state_mutex_);
  s.number = count_++;
  total_->add(s);
  window_->add(s);
  latest_ = s;
  return s;
}

Snapshot DeviceMonitor::latest() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return latest_;
}

int64_t DeviceMonitor::samples() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return count_;
}

Totals DeviceMonitor::totals() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return total_->totals();
}

Totals DeviceMonitor::take_window() {
  sample_now();
  std::lock_guard<std::mutex> lock(state_mutex_);
  Totals t = window_->totals();
  window_ = std::make_unique<Accumulator>(latest_);
  return t;
}

}  // namespace gradus::monitor
