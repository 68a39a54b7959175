// The host side of gradus::monitor: CPU utilisation and resident memory from /proc, and package
// energy from RAPL (/sys/class/powercap). Linux only; readings that cannot be made are empty.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gradus::monitor {

// RAPL package energy: the sum over CPU packages of intel-rapl:N/energy_uj (also AMD's, which
// Linux exposes under the same name), with each counter's wraparound at max_energy_range_uj
// undone. Subdomains (intel-rapl:N:M: cores, uncore, DRAM) are parts of their package and skipped,
// as is psys (the whole platform, which contains the packages). Since Linux 5.10 energy_uj is
// readable by root only (CVE-2020-8694), so without root RAPL is usually absent.
class RaplReader {
 public:
  explicit RaplReader(std::string powercap_root = "/sys/class/powercap");
  bool available() const { return !domains_.empty(); }
  // "RAPL: 2 packages" or "RAPL not available: ..."
  const std::string& status() const { return status_; }
  // Joules used since construction; empty when no package is readable. A counter must not wrap
  // twice between calls (at 250 W, about 17 minutes for a 262 kJ range): call it periodically.
  std::optional<double> energy_joules();

 private:
  struct Domain {
    std::string path;  // .../energy_uj
    uint64_t range_uj = 0;
    uint64_t last_uj = 0;
    double total_uj = 0;
  };
  std::vector<Domain> domains_;
  std::string status_;
};

struct CpuSample {
  // Busy time of all processors over the last interval (/proc/stat), 0-100.
  std::optional<double> system_util_percent;
  // CPU time of the watched process over the last interval in percent of one processor, as top
  // shows it (200 = two processors busy).
  std::optional<double> process_util_percent;
  std::optional<uint64_t> rss_bytes;       // the watched process's resident memory
  std::optional<double> package_power_w;   // RAPL, over the last interval
  std::optional<double> package_energy_j;  // RAPL, since the sampler was made
};

class CpuSampler {
 public:
  struct Options {
    int pid = 0;  // the process to watch; 0 is this one
    std::string proc_root = "/proc";
    std::string powercap_root = "/sys/class/powercap";
  };
  CpuSampler() : CpuSampler(Options{}) {}
  explicit CpuSampler(Options options);
  // Readings now; utilisation and power are averages since the previous call (or construction),
  // absent when that was less than 10 ms ago.
  CpuSample sample();
  const std::string& rapl_status() const { return rapl_.status(); }

 private:
  struct Times {
    std::optional<uint64_t> process_ticks;
    std::optional<uint64_t> system_busy, system_total;
  };
  Times read_times() const;
  std::string process_dir() const;

  Options options_;
  RaplReader rapl_;
  Times last_;
  std::optional<double> last_energy_j_;
  std::chrono::steady_clock::time_point last_time_;
  double ticks_per_s_;
  uint64_t page_bytes_;
};

}  // namespace gradus::monitor
