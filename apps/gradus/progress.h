// A progress bar for training loops on stderr: loss, samples/s, peak memory and ETA. On a terminal
// it redraws one line with '\r' (at most ~10 times a second); when stderr is a file or pipe it
// prints a plain line at about every 10% of the work, so logs stay readable.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gradus::cli {

class Progress {
 public:
  // `label` prefixes every line (e.g. "epoch 3/10"); total = steps in this bar.
  Progress(std::string label, int64_t total, bool enabled = true);
  // After step `done` (1-based) with the running mean loss, samples processed so far and, when
  // known, the peak bytes tensors held so far (shown as "peak 123.4 MiB").
  void update(int64_t done, double loss, int64_t samples, size_t peak_bytes = 0);
  // Seconds the loop has waited for data so far (shown as "data wait 3%" of the elapsed time).
  void set_data_wait(double seconds) { data_wait_ = seconds; }
  // The device monitor's latest reading (monitor::progress_text: "GPU 87% 12.3/80.0 GiB 250 W"
  // or "CPU 195% RSS 812 MiB"), shown before the ETA; empty: nothing.
  void set_monitor_text(std::string text) { monitor_text_ = std::move(text); }
  // Ends the bar (a newline on a terminal).
  void finish();
  double elapsed_seconds() const;

 private:
  std::string line(int64_t done, double loss, int64_t samples, size_t peak_bytes) const;

  std::string label_;
  int64_t total_;
  bool enabled_;
  bool tty_;
  int64_t last_tenth_ = 0;  // non-tty: tenths of the work already reported
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  bool drawn_ = false;
  double data_wait_ = -1;  // < 0: not shown
  std::string monitor_text_;
};

// "1:02:03" or "2:03".
std::string format_duration(double seconds);

}  // namespace gradus::cli
