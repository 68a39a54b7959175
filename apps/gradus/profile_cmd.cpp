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

train::ProfileOptions profile_options(const std::string& path, const std::string& steps,
                                      bool write) {
  GRADUS_CHECK(!path.empty() || steps.empty(), ValueError,
               "train: --profile-steps needs --profile FILE");
  if (path.empty()) return {};
  const StepRange range = parse_step_range(steps);
  GRADUS_CHECK(monitor::Profiler::available(), ValueError,
               "train: --profile: this build of gradus has the profiler compiled out "
               "(configured with -DGRADUS_PROFILER=OFF)");
  if (!write) return {};  // other ranks: only the lead profiles
  check_writable(path);
  return {.trace = path, .first_step = range.first, .last_step = range.last};
}

}  // namespace gradus::cli
