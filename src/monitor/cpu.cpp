#include "gradus/monitor/cpu.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gradus::monitor {

namespace {

std::optional<uint64_t> read_u64(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

RaplReader::RaplReader(std::string powercap_root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> unreadable;
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(powercap_root, ec)) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& dir : dirs) {
    const std::string name = dir.filename().string();
    // intel-rapl:N is a package (or psys); intel-rapl:N:M is one of its parts.
    if (name.rfind("intel-rapl:", 0) != 0 || std::count(name.begin(), name.end(), ':') != 1) {
      continue;
    }
    if (read_line((dir / "name").string()) == "psys") continue;
    Domain d;
    d.path = (dir / "energy_uj").string();
    const std::optional<uint64_t> now = read_u64(d.path);
    if (!now) {
      unreadable.push_back(d.path);
      continue;
    }
    d.last_uj = *now;
    d.range_uj = read_u64((dir / "max_energy_range_uj").string()).value_or(0);
    domains_.push_back(d);
  }
  if (!domains_.empty()) {
    status_ =
        "RAPL: " + std::to_string(domains_.size()) + " package" + (domains_.size() == 1 ? "" : "s");
  } else if (!unreadable.empty()) {
    status_ =
        "RAPL not available: cannot read " + unreadable.front() + " (root only since Linux 5.10)";
  } else {
    status_ = "RAPL not available: no intel-rapl package under " + powercap_root;
  }
}

std::optional<double> RaplReader::energy_joules() {
  if (domains_.empty()) return std::nullopt;
  double total_uj = 0;
  for (Domain& d : domains_) {
    if (const std::optional<uint64_t> now = read_u64(d.path)) {
      // A smaller value means the counter passed max_energy_range_uj and restarted at 0.
      const uint64_t delta = *now >= d.last_uj ? *now - d.last_uj : d.range_uj - d.last_uj + *now;
      d.total_uj += static_cast<double>(delta);
      d.last_uj = *now;
    }
    total_uj += d.total_uj;
  }
  return total_uj / 1e6;
}

CpuSampler::CpuSampler(Options options)
    : options_(std::move(options)),
      rapl_(options_.powercap_root),
      ticks_per_s_(static_cast<double>(sysconf(_SC_CLK_TCK))),
      page_bytes_(static_cast<uint64_t>(sysconf(_SC_PAGESIZE))) {
  last_ = read_times();
  last_energy_j_ = rapl_.energy_joules();
  last_time_ = std::chrono::steady_clock::now();
}

std::string CpuSampler::process_dir() const {
  return options_.proc_root + "/" + (options_.pid > 0 ? std::to_string(options_.pid) : "self");
}

CpuSampler::Times CpuSampler::read_times() const {
  Times t;
  // /proc/PID/stat: "pid (comm) state ..."; comm may hold spaces and parentheses, so the fields
  // are counted from the last ')'. utime and stime are fields 14 and 15.
  const std::string stat = read_line(process_dir() + "/stat");
  if (const size_t paren = stat.rfind(')'); paren != std::string::npos) {
    std::istringstream in(stat.substr(paren + 1));
    std::string skipped;  // fields 3 (state) to 13
    for (int field = 3; field <= 13; ++field) in >> skipped;
    if (uint64_t utime = 0, stime = 0; in >> utime >> stime) t.process_ticks = utime + stime;
  }
  // /proc/stat: "cpu user nice system idle iowait irq softirq steal ..." (guest time is already
  // part of user).
  std::istringstream cpu(read_line(options_.proc_root + "/stat"));
  std::string label;
  uint64_t v[8] = {};
  if (cpu >> label && label == "cpu" &&
      cpu >> v[0] >> v[1] >> v[2] >> v[3] >> v[4] >> v[5] >> v[6] >> v[7]) {
    uint64_t total = 0;
    for (uint64_t x : v) total += x;
    t.system_total = total;
    t.system_busy = total - v[3] - v[4];
  }
  return t;
}

CpuSample CpuSampler::sample() {
  CpuSample s;
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - last_time_).count();
  // Process times advance in kernel ticks (10 ms): over a shorter interval one tick more or less
  // would read as 0 % or thousands of percent, so such a reading has no rates.
  const bool rates = dt >= 0.01;
  const Times t = read_times();
  if (rates && t.process_ticks && last_.process_ticks) {
    s.process_util_percent =
        100.0 * static_cast<double>(*t.process_ticks - *last_.process_ticks) / ticks_per_s_ / dt;
  }
  if (rates && t.system_total && last_.system_total && *t.system_total > *last_.system_total) {
    s.system_util_percent = 100.0 * static_cast<double>(*t.system_busy - *last_.system_busy) /
                            static_cast<double>(*t.system_total - *last_.system_total);
  }
  // statm: total size, then resident size, in pages.
  std::ifstream statm(process_dir() + "/statm");
  if (uint64_t size = 0, resident = 0; statm >> size >> resident) {
    s.rss_bytes = resident * page_bytes_;
  }
  s.package_energy_j = rapl_.energy_joules();
  if (rates && s.package_energy_j && last_energy_j_) {
    s.package_power_w = (*s.package_energy_j - *last_energy_j_) / dt;
  }
  last_ = t;
  last_energy_j_ = s.package_energy_j;
  last_time_ = now;
  return s;
}

}  // namespace gradus::monitor
