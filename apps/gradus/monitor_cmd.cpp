// gradus monitor: an nvidia-smi-dmon-like table of every GPU (NVML) and the host (CPU busy, a
// process's CPU and RSS, RAPL package power), one row per reading per GPU.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>

#include "commands.h"
#include "gradus/core/error.h"
#include "gradus/monitor/monitor.h"

namespace gradus::cli {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_interrupt(int) {
  g_interrupted = 1;
}

// A column: its header, width in the table, and the text of one cell (empty when not measured).
struct Column {
  const char* name;
  int width;
  std::function<std::string(const monitor::Snapshot&, const monitor::Totals&, size_t gpu)> cell;
};

std::string number(const std::optional<double>& v, int decimals) {
  if (!v) return {};
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, *v);
  return buf;
}

template <typename T>
std::optional<double> scaled(const std::optional<T>& v, double divisor) {
  if (!v) return std::nullopt;
  return static_cast<double>(*v) / divisor;
}

std::vector<Column> columns(bool gpus, bool process, bool rapl) {
  using monitor::Snapshot;
  using monitor::Totals;
  std::vector<Column> c;
  c.push_back(
      {"time_s", 8, [](const Snapshot& s, const Totals&, size_t) { return number(s.time_s, 2); }});
  if (gpus) {
    // One reading's field of GPU g, scaled and printed with `decimals`.
    auto field = [](auto member, double divisor, int decimals) {
      return [=](const Snapshot& s, const Totals&, size_t g) {
        return number(scaled(s.gpus[g].*member, divisor), decimals);
      };
    };
    using G = monitor::GpuSample;
    c.push_back({"gpu", 3, [](const Snapshot& s, const Totals&, size_t g) {
                   return std::to_string(s.gpus[g].index);
                 }});
    c.push_back({"sm%", 4, field(&G::util_percent, 1, 0)});
    c.push_back({"mem%", 4, field(&G::memory_util_percent, 1, 0)});
    c.push_back({"fb_MiB", 8, field(&G::memory_used_bytes, 1 << 20, 0)});
    c.push_back({"pwr_W", 6, field(&G::power_w, 1, 1)});
    c.push_back({"plim_W", 6, field(&G::power_limit_w, 1, 0)});
    c.push_back({"temp_C", 6, field(&G::temperature_c, 1, 0)});
    c.push_back({"sm_MHz", 6, field(&G::sm_clock_mhz, 1, 0)});
    c.push_back({"mem_MHz", 7, field(&G::memory_clock_mhz, 1, 0)});
    c.push_back({"tx_MB/s", 8, field(&G::pcie_tx_bytes_per_s, 1e6, 1)});
    c.push_back({"rx_MB/s", 8, field(&G::pcie_rx_bytes_per_s, 1e6, 1)});
    c.push_back({"energy_J", 9, [](const Snapshot&, const Totals& t, size_t g) {
                   return number(t.gpus[g].energy_j, 1);
                 }});
    c.push_back({"throttle", 14, [](const Snapshot& s, const Totals&, size_t g) {
                   const auto& r = s.gpus[g].clock_event_reasons;
                   return r ? monitor::describe_clock_event_reasons(*r) : std::string();
                 }});
  }
  c.push_back({"cpu%", 5, [](const Snapshot& s, const Totals&, size_t) {
                 return number(s.cpu.system_util_percent, 0);
               }});
  if (process) {
    c.push_back({"proc%", 6, [](const Snapshot& s, const Totals&, size_t) {
                   return number(s.cpu.process_util_percent, 0);
                 }});
    c.push_back({"rss_MiB", 8, [](const Snapshot& s, const Totals&, size_t) {
                   return number(scaled(s.cpu.rss_bytes, 1 << 20), 0);
                 }});
  }
  if (rapl) {
    c.push_back({"pkg_W", 6, [](const Snapshot& s, const Totals&, size_t) {
                   return number(s.cpu.package_power_w, 1);
                 }});
  }
  return c;
}

void print_row(const std::vector<Column>& cols, bool csv,
               const std::function<std::string(const Column&)>& text) {
  std::string line;
  for (size_t i = 0; i < cols.size(); ++i) {
    std::string cell = text(cols[i]);
    if (csv) {
      line += (i ? "," : "") + cell;
    } else {
      if (cell.empty()) cell = "-";
      const size_t width = static_cast<size_t>(cols[i].width);
      line +=
          (i ? " " : "") + std::string(cell.size() < width ? width - cell.size() : 0, ' ') + cell;
    }
  }
  std::printf("%s\n", line.c_str());
}

}  // namespace

std::chrono::milliseconds parse_interval(const std::string& text) {
  const std::optional<double> ms =
      number_with_unit(text, {{"ms", 1}, {"", 1e3}, {"s", 1e3}, {"m", 6e4}});
  GRADUS_CHECK(ms && *ms >= 10 && *ms <= 86400e3, ValueError, "'", text,
               "' is not an interval: expected a number with an optional unit (ms, s, m) from "
               "10ms to 24 hours, e.g. 500ms or 2s");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(*ms)));
}

void add_monitor_command(CLI::App& app, MonitorOptions& o) {
  CLI::App* c = app.add_subcommand(
      "monitor", "Watch the GPUs (NVML) and the host: a table like nvidia-smi dmon");
  c->add_option("--interval", o.interval, "Time between readings (e.g. 500ms, 1s, 1m)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              (void)parse_interval(text);
              return {};
            } catch (const Error& e) {
              return e.what();
            }
          },
          "DURATION"))
      ->capture_default_str();
  c->add_option("--count", o.count, "Stop after N readings (0: until Ctrl-C)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c->add_flag("--csv", o.csv, "Comma-separated values (empty fields where not measured)");
  c->add_option("--pid", o.pid, "Also show this process's CPU use and resident memory")
      ->check(CLI::PositiveNumber);
  c->add_option("--nvml-library", o.nvml_library,
                "The NVML library to load (default: $GRADUS_NVML_LIBRARY or libnvidia-ml.so.1)");
}

int run_monitor(const MonitorOptions& o) {
  const std::chrono::milliseconds interval = parse_interval(o.interval);
  GRADUS_CHECK(o.pid == 0 || std::filesystem::exists("/proc/" + std::to_string(o.pid)), ValueError,
               "monitor: --pid ", o.pid, ": no such process");
  monitor::DeviceMonitor::Options options{
      .interval = std::chrono::milliseconds(0), .nvml_library = o.nvml_library, .pcie = true};
  options.cpu.pid = o.pid;
  monitor::DeviceMonitor mon(options);
  const bool gpus = !mon.latest().gpus.empty();
  const bool rapl = mon.latest().cpu.package_energy_j.has_value();
  if (!mon.gpus_available()) {
    std::fprintf(stderr, "gradus monitor: %s; showing the CPU columns only\n",
                 mon.nvml_status().c_str());
  } else if (!gpus) {
    std::fprintf(stderr, "gradus monitor: %s: no GPU to show\n", mon.nvml_status().c_str());
  }
  if (!rapl) std::fprintf(stderr, "gradus monitor: %s\n", mon.rapl_status().c_str());
  const std::vector<Column> cols = columns(gpus, o.pid > 0, rapl);
  print_row(cols, o.csv, [&](const Column& c) {
    return o.csv || &c != &cols.front() ? std::string(c.name) : "#" + std::string(c.name);
  });
  std::fflush(stdout);

  // Ctrl-C ends the table after the current row, with the summary.
  struct sigaction action = {};
  action.sa_handler = on_interrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  auto next = std::chrono::steady_clock::now() + interval;
  for (int64_t n = 0; (o.count == 0 || n < o.count) && !g_interrupted; ++n) {
    while (!g_interrupted && std::chrono::steady_clock::now() < next) {
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          next - std::chrono::steady_clock::now(), std::chrono::milliseconds(50)));
    }
    if (g_interrupted) break;
    const monitor::Snapshot s = mon.sample_now();
    const monitor::Totals t = mon.totals();
    for (size_t g = 0; g < std::max<size_t>(s.gpus.size(), 1); ++g) {
      print_row(cols, o.csv, [&](const Column& c) { return c.cell(s, t, g); });
    }
    std::fflush(stdout);
    next += interval;
  }

  const monitor::Totals t = mon.totals();
  std::string summary;
  for (const monitor::GpuTotals& g : t.gpus) {
    if (!g.energy_j) continue;
    char buf[128];
    std::snprintf(buf, sizeof(buf), ", GPU %d %.1f J (%.1f W mean)", g.index, *g.energy_j,
                  g.mean_power_w.value_or(0));
    summary += buf;
  }
  if (t.cpu_energy_j) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), ", CPU packages %.1f J", *t.cpu_energy_j);
    summary += buf;
  }
  std::fprintf(stderr, "gradus monitor: %lld readings over %.1f s%s\n",
               static_cast<long long>(t.samples), t.seconds, summary.c_str());
  return 0;
}

}  // namespace gradus::cli
