#include "plot.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>

#include "gradus/core/error.h"

namespace gradus::cli::plot {

namespace {

struct Metric {
  const char* key;
  const char* label;
  double scale;
};
struct PanelSpec {
  const char* title;
  std::vector<Metric> metrics;
};

constexpr double kMiB = 1.0 / (1 << 20);
// The keys `gradus train --metrics` writes (train.cpp), and the monitor's (Totals::to_json).
const PanelSpec kPanels[] = {
    {"loss",
     {{"loss", "train (steps)", 1},
      {"train_loss", "train", 1},
      {"test_loss", "test", 1},
      {"val_loss", "validation", 1}}},
    {"accuracy",
     {{"train_accuracy", "train", 1},
      {"test_accuracy", "test", 1},
      {"val_accuracy", "validation", 1},
      {"accuracy", "accuracy", 1}}},
    {"throughput (samples/s)", {{"samples_per_s", "samples/s", 1}}},
    {"throughput (tokens/s)", {{"tokens_per_s", "tokens/s", 1}}},
    {"memory (MiB)",
     {{"peak_memory_bytes", "peak tensor memory", kMiB},
      {"gpu_memory_peak_bytes", "GPU (NVML)", kMiB},
      {"rss_peak_bytes", "process RSS", kMiB}}},
    {"GPU utilisation (%)",
     {{"gpu_util_percent", "mean", 1}, {"gpu_util_peak_percent", "peak", 1}}},
    {"power (W)", {{"gpu_power_w", "GPUs", 1}, {"cpu_power_w", "CPU packages", 1}}},
    {"learning rate", {{"lr", "lr", 1}}},
};

// A key of the line, or of its "monitor" object (gradus train writes the monitor's readings there).
std::optional<double> number(const nlohmann::json& line, const char* key) {
  auto it = line.find(key);
  if (it == line.end()) {
    const auto monitor = line.find("monitor");
    if (monitor == line.end() || !monitor->is_object()) return std::nullopt;
    it = monitor->find(key);
    if (it == monitor->end()) return std::nullopt;
  }
  if (!it->is_number()) return std::nullopt;  // null for NaN
  return it->get<double>();
}

// Step -> epoch and step -> seconds, piecewise linear through the epoch summaries' last steps.
struct Anchor {
  double step, epoch, time;
};

std::optional<double> along(const std::vector<Anchor>& a, double step, double Anchor::*field) {
  if (a.size() < 2) return std::nullopt;
  size_t i = 0;  // the segment [a[i], a[i+1]] holding step (the last one beyond the end)
  while (i + 2 < a.size() && step > a[i + 1].step) ++i;
  const double span = a[i + 1].step - a[i].step;
  if (span <= 0) return a[i + 1].*field;
  return a[i].*field + (step - a[i].step) / span * (a[i + 1].*field - a[i].*field);
}

// The x of every line of a run (empty where the line has none on this axis).
std::vector<std::optional<double>> x_values(const Run& run, const std::string& x) {
  std::vector<Anchor> anchors{{0, 0, 0}};
  std::vector<std::optional<double>> summary_time(run.lines.size());
  double seconds = 0;
  for (size_t i = 0; i < run.lines.size(); ++i) {
    const nlohmann::json& line = run.lines[i];
    const std::optional<double> epoch_seconds = number(line, "epoch_seconds");
    if (!epoch_seconds) continue;
    seconds += *epoch_seconds;
    summary_time[i] = seconds;
    const std::optional<double> step = number(line, "step"), epoch = number(line, "epoch");
    if (step && epoch) anchors.push_back({*step, *epoch, seconds});
  }
  std::vector<std::optional<double>> xs;
  for (size_t i = 0; i < run.lines.size(); ++i) {
    const nlohmann::json& line = run.lines[i];
    const bool summary = summary_time[i].has_value();
    const std::optional<double> step = number(line, "step");
    std::optional<double> v;
    if (x == "step") {
      v = step;
    } else if (x == "epoch") {
      if (summary) {
        v = number(line, "epoch");
      } else if (step) {
        v = along(anchors, *step, &Anchor::epoch);
      }
    } else {  // time
      v = number(line, "elapsed_s");
      if (!v && summary) v = summary_time[i];
      if (!v && step) v = along(anchors, *step, &Anchor::time);
    }
    xs.push_back(v);
  }
  return xs;
}

}  // namespace

Run read_run(const std::string& path) {
  std::ifstream in(path);
  GRADUS_CHECK(in.is_open(), IOError, path, ": cannot open");
  Run run;
  run.name = std::filesystem::path(path).filename().string();
  std::string text;
  for (int number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json line;
    try {
      line = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw IOError(detail::str_cat(path, ":", number, ": not valid JSON (", e.what(), ")"));
    }
    GRADUS_CHECK(line.is_object(), IOError, path, ":", number, ": expected a JSON object, got ",
                 line.type_name());
    run.lines.push_back(std::move(line));
  }
  return run;
}

std::vector<Panel> make_panels(const std::vector<Run>& runs, const std::string& x) {
  std::vector<std::vector<std::optional<double>>> xs;
  for (const Run& run : runs) xs.push_back(x_values(run, x));
  std::vector<Panel> panels;
  for (const PanelSpec& spec : kPanels) {
    Panel panel{spec.title, {}, {}};
    for (const Metric& m : spec.metrics) {
      const size_t metric = panel.metrics.size();
      for (size_t r = 0; r < runs.size(); ++r) {
        Line line{r, metric, {}};
        for (size_t i = 0; i < runs[r].lines.size(); ++i) {
          const std::optional<double> y = number(runs[r].lines[i], m.key);
          if (y && xs[r][i]) line.points.push_back({*xs[r][i], *y * m.scale});
        }
        if (line.points.empty()) continue;
        // A resumed run appends to its file, so steps can repeat: draw them in x order.
        std::stable_sort(line.points.begin(), line.points.end(),
                         [](const Point& a, const Point& b) { return a.x < b.x; });
        panel.lines.push_back(std::move(line));
      }
      if (!panel.lines.empty() && panel.lines.back().metric == metric) {
        panel.metrics.push_back(m.label);
      }
    }
    if (!panel.lines.empty()) panels.push_back(std::move(panel));
  }
  return panels;
}

std::string x_label(const std::string& x) {
  return x == "time" ? "time (s)" : x;
}

}  // namespace gradus::cli::plot
