#include "profile_cmd.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "gradus/core/error.h"
#include "gradus/monitor/monitor.h"
#include "gradus/monitor/profiler.h"
#include "run_monitor.h"

namespace gradus::cli {

namespace {
// Steps 1-2 warm up (first-touch allocations, OpenBLAS buffers, caches); 3-5 are typical.
constexpr StepRange kDefaultRange{3, 5};

bool parse_int(std::string_view s, int64_t& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

// Opens the trace file for appending (which creates nothing that was not there when it fails)
// and removes it again if it was new: the run must not leave an empty trace behind on error.
void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  GRADUS_CHECK(!fs::is_directory(p, ec), IOError, "train: --profile ", path, " is a directory");
  const fs::path parent = p.parent_path();
  GRADUS_CHECK(parent.empty() || fs::is_directory(parent, ec), IOError, "train: --profile ", path,
               ": the directory '", parent.string(), "' does not exist");
  const bool existed = fs::exists(p, ec);
  {
    std::ofstream probe(path, std::ios::app);
    GRADUS_CHECK(probe.good(), IOError, "train: --profile ", path, ": cannot write this file");
  }
  if (!existed) fs::remove(p, ec);
}
}  // namespace

void add_profile_options(CLI::App& c, TrainOptions& o) {
  c.add_option("--profile", o.profile,
               "Profile some training steps: write their Chrome trace (Perfetto, "
               "chrome://tracing; with tensor shapes) to this file and print the summary table");
  c.add_option("--profile-steps", o.profile_steps,
               "Steps to profile, A:B (1-based, inclusive; default 3:5, after warm-up)");
}

StepRange parse_step_range(const std::string& text) {
  if (text.empty()) return kDefaultRange;
  const size_t colon = text.find(':');
  StepRange r;
  const std::string_view s(text);
  const bool ok = colon != std::string::npos && parse_int(s.substr(0, colon), r.first) &&
                  parse_int(s.substr(colon + 1), r.last);
  GRADUS_CHECK(ok, ValueError, "train: --profile-steps '", text,
               "' is not a step range A:B (e.g. 3:5)");
  GRADUS_CHECK(r.first >= 1, ValueError, "train: --profile-steps ", text, ": steps count from 1");
  GRADUS_CHECK(r.last >= r.first, ValueError, "train: --profile-steps ", text, ": the last step (",
               r.last, ") is before the first (", r.first, ")");
  return r;
}

TrainingProfiler::TrainingProfiler(const std::string& path, const std::string& steps, bool write,
                                   const Device& device)
    : path_(path), device_(device) {
  GRADUS_CHECK(!path.empty() || steps.empty(), ValueError,
               "train: --profile-steps needs --profile FILE");
  if (path.empty()) return;
  range_ = parse_step_range(steps);
  GRADUS_CHECK(monitor::Profiler::available(), ValueError,
               "train: --profile: this build of gradus has the profiler compiled out "
               "(configured with -DGRADUS_PROFILER=OFF)");
  if (!write) return;  // other ranks: only the lead profiles
  check_writable(path);
  enabled_ = true;
}

TrainingProfiler::~TrainingProfiler() = default;

void TrainingProfiler::at_step(int64_t completed) {
  if (!enabled_ || done_) return;
  if (profiler_) {
    profiler_->step();
    ++recorded_steps_;
    if (completed >= range_.last) report();
  } else if (completed == range_.first - 1) {
    // A few steps only: the shapes' formatting is affordable, and they make the trace readable.
    // The monitor's readings become counter tracks (GPU utilisation, memory and power, or the
    // process's CPU and RSS) next to the ops.
    monitor_ = make_run_monitor(device_, std::chrono::milliseconds(50));
    profiler_ = std::make_unique<monitor::Profiler>(
        monitor::ProfilerOptions{.record_shapes = true, .monitor = monitor_.get()});
  }
}

void TrainingProfiler::finish() {
  if (!enabled_ || done_) return;
  if (!profiler_) {
    std::fprintf(stderr,
                 "gradus train: warning: --profile: training ended before step %lld; no trace "
                 "written\n",
                 static_cast<long long>(range_.first));
    done_ = true;
    return;
  }
  report();
}

void TrainingProfiler::report() {
  done_ = true;
  monitor_->sample_now();  // a reading at the end, however short the profiled steps were
  const monitor::Profile profile = profiler_->stop();
  profiler_.reset();
  monitor_.reset();
  profile.write_chrome_trace(path_);
  std::fprintf(stderr,
               "gradus train: profile of steps %lld-%lld (%zu events, %zu monitor counter "
               "values) written to %s\n%s",
               static_cast<long long>(range_.first),
               static_cast<long long>(range_.first + recorded_steps_ - 1), profile.num_events(),
               profile.counters().size(), path_.c_str(), profile.table().c_str());
}

}  // namespace gradus::cli
