// gradus::monitor::DeviceMonitor: a background thread that reads the GPUs (NVML) and the host
// (/proc, RAPL) every interval and keeps the latest readings and running aggregates: energy,
// mean and peak utilisation, peak memory. What a training loop calls:
//
//   monitor::DeviceMonitor mon({.interval = std::chrono::seconds(1)});
//   ... each epoch:  metrics_line.update(nlohmann::json::parse(mon.take_window().to_json()));
//   ... at the end:  mon.totals().energy_j()
//
// Construction never throws for a missing driver or unreadable counters: status() says what is
// measured, and absent readings are empty optionals (and absent JSON keys).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gradus/monitor/cpu.h"
#include "gradus/monitor/nvml.h"

namespace gradus::monitor {

struct Snapshot {
  double time_s = 0;   // seconds since the monitor was made
  int64_t number = 0;  // 0 for the reading taken at construction, then 1, 2, ...
  CpuSample cpu;
  std::vector<GpuSample> gpus;  // the watched GPUs, in Options::gpus order
};

// A few words for a training progress line. With GPUs: their mean utilisation, used and total
// memory and power summed over the watched GPUs ("GPU 45% 21.0/160.0 GiB 301 W"; a reading a GPU
// lacks is left out). Without: the process's CPU use and resident memory ("CPU 195% RSS 812 MiB").
// Empty when nothing of the kind was read.
std::string progress_text(const Snapshot& s);

struct GpuTotals {
  int index = 0;
  std::string name;
  std::optional<double> mean_util_percent;
  std::optional<double> peak_util_percent;
  std::optional<uint64_t> peak_memory_used_bytes;
  std::optional<double> peak_power_w;
  std::optional<double> mean_power_w;  // energy_j / seconds
  // NVML's energy counter difference when the GPU has one, else the trapezoid integral of the
  // power readings (a 1 s interval misses sub-second peaks; the counter does not).
  std::optional<double> energy_j;
  bool energy_from_counter = false;
};

// Aggregates over a window of readings: from its start reading (exclusive) to its last. Means and
// peaks are over the readings taken after the start; energies over the whole span.
struct Totals {
  int64_t samples = 0;
  double seconds = 0;  // from the start reading to the last
  std::vector<GpuTotals> gpus;
  std::optional<double> mean_cpu_util_percent;     // all processors, 0-100
  std::optional<double> mean_process_cpu_percent;  // the watched process, 100 per busy core
  std::optional<uint64_t> peak_rss_bytes;
  std::optional<double> cpu_energy_j;  // RAPL packages

  std::optional<double> gpu_energy_j() const;  // summed over GPUs; empty when none measured
  // Everything measured: GPUs plus CPU packages (0 when neither is).
  double energy_j() const;
  // The same, but empty when neither GPU nor CPU package energy was measured (so that a report
  // can say null rather than 0 J).
  std::optional<double> measured_energy_j() const;
  // Where measured_energy_j() comes from: "nvml-counter", "nvml-power-integral", "rapl", joined
  // by '+'; empty when it is empty.
  std::string energy_source() const;
  // One flat JSON object for a metrics line; keys absent when not measured:
  //   gpu_util_percent (mean over readings and GPUs), gpu_util_peak_percent,
  //   gpu_memory_peak_bytes (largest GPU), gpu_power_w and gpu_energy_j (summed over GPUs),
  //   cpu_util_percent, process_cpu_percent, rss_peak_bytes, cpu_power_w, cpu_energy_j,
  //   monitor_samples, monitor_seconds. `gradus plot` draws gpu_util_percent and *_power_w.
  std::string to_json() const;
};

class DeviceMonitor {
 public:
  struct Options {
    // Time between readings; zero: no thread, readings only from sample_now() / take_window().
    std::chrono::milliseconds interval{1000};
    bool nvml = true;            // false: do not load NVML (CPU only)
    std::string nvml_library{};  // see Nvml(); empty: $GRADUS_NVML_LIBRARY or libnvidia-ml.so.1
    std::vector<int> gpus{};     // NVML indices to watch; empty: all
    bool pcie = false;           // read PCIe throughput (NVML spends 2 x 20 ms per GPU on it)
    CpuSampler::Options cpu{};
  };
  DeviceMonitor() : DeviceMonitor(Options{}) {}
  // Takes the first reading, then starts the thread (when interval > 0).
  explicit DeviceMonitor(Options options);
  ~DeviceMonitor();  // stop()
  DeviceMonitor(const DeviceMonitor&) = delete;
  DeviceMonitor& operator=(const DeviceMonitor&) = delete;

  // Ends the thread (waking it: no wait for the interval). Idempotent.
  void stop();
  // Takes a reading on the calling thread, adds it to the aggregates and returns it.
  Snapshot sample_now();

  Snapshot latest() const;
  int64_t samples() const;  // readings taken, the one at construction included
  Totals totals() const;    // since construction
  // Takes a reading, returns the aggregates since the previous take_window() (or construction)
  // and starts the next window at that reading: one call per epoch gives per-epoch figures.
  Totals take_window();
  double energy_joules() const { return totals().energy_j(); }
  std::string to_json() const { return totals().to_json(); }

  bool gpus_available() const { return nvml_ && nvml_->available(); }
  const std::string& nvml_status() const { return nvml_status_; }
  const std::string& rapl_status() const { return cpu_.rapl_status(); }
  std::string status() const { return nvml_status_ + "; " + rapl_status(); }

 private:
  struct Accumulator;  // monitor.cpp
  Snapshot read();
  void run();

  Options options_;
  std::unique_ptr<Nvml> nvml_;
  std::string nvml_status_;
  std::vector<int> gpu_indices_;
  CpuSampler cpu_;
  std::chrono::steady_clock::time_point start_;

  std::mutex sample_mutex_;  // one reading at a time (the thread or sample_now)
  mutable std::mutex state_mutex_;
  Snapshot latest_;
  int64_t count_ = 0;
  std::unique_ptr<Accumulator> total_, window_;

  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace gradus::monitor
