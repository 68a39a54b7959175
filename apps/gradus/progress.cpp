#include "progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace gradus::cli {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

Progress::Progress(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string Progress::line(int64_t done, double loss, int64_t samples, size_t peak_bytes) const {
  const double elapsed = elapsed_seconds();
  const double rate = elapsed > 0 ? static_cast<double>(samples) / elapsed : 0.0;
  const double eta = done > 0 ? elapsed * static_cast<double>(total_ - done) / done : NAN;
  constexpr int kWidth = 24;
  const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>' + std::string(static_cast<size_t>(kWidth - filled - 1), ' ');
  char memory[48] = "";
  if (peak_bytes > 0) {
    std::snprintf(memory, sizeof(memory), "  peak %.1f MiB",
                  static_cast<double>(peak_bytes) / (1 << 20));
  }
  char wait[40] = "";
  if (data_wait_ >= 0 && elapsed > 0) {
    std::snprintf(wait, sizeof(wait), "  data wait %.0f%%", 100.0 * data_wait_ / elapsed);
  }
  const std::string monitor = monitor_text_.empty() ? "" : "  " + monitor_text_;
  char buf[480];
  std::snprintf(buf, sizeof(buf), "%s [%s] %lld/%lld loss %.4f  %.0f samples/s%s%s%s  ETA %s",
                label_.c_str(), bar.c_str(), static_cast<long long>(done),
                static_cast<long long>(total_), loss, rate, memory, wait, monitor.c_str(),
                format_duration(eta).c_str());
  return buf;
}

void Progress::update(int64_t done, double loss, int64_t samples, size_t peak_bytes) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (done < total_ && drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    std::fprintf(stderr, "\r%s\033[K", line(done, loss, samples, peak_bytes).c_str());
    std::fflush(stderr);
    last_draw_ = now;
    drawn_ = true;
  } else {
    // One line per completed tenth of the work (so at most 10 lines, the last at 100%).
    const int64_t tenth = total_ > 0 ? 10 * done / total_ : 10;
    if (tenth > last_tenth_) {
      std::fprintf(stderr, "%s\n", line(done, loss, samples, peak_bytes).c_str());
      std::fflush(stderr);
      last_tenth_ = tenth;
    }
  }
}

void Progress::finish() {
  if (enabled_ && tty_ && drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace gradus::cli
