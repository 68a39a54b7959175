// gradus plot: metrics JSONL files read into runs and panels (plot_data.cpp), drawn with cairo
// (plot_render.cpp, the only code that needs cairo; the command is in plot.cpp).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gradus::cli::plot {

struct Run {
  std::string name;  // shown in the legend
  std::vector<nlohmann::json> lines;
};

// Reads one JSON object per line (blank lines skipped). A line that is not a JSON object is an
// IOError naming the file and the line number.
Run read_run(const std::string& path);

struct Point {
  double x, y;
};

// One metric of one run in one panel.
struct Line {
  size_t run;                 // index into the runs: the colour
  size_t metric;              // index into Panel::metrics: the dash pattern
  std::vector<Point> points;  // sorted by x
};

struct Panel {
  std::string title;
  std::vector<std::string> metrics;  // labels of the metrics that have points
  std::vector<Line> lines;
};

// The panels that have data, in a fixed order (loss, accuracy, throughput, memory, GPU
// utilisation, power, learning rate). x is "step", "epoch" or "time":
//   step:  the line's "step"
//   epoch: the epoch summary's "epoch"; a step line's step placed between its epochs' last steps
//   time:  "elapsed_s" when lines have it, else the sum of the summaries' "epoch_seconds" (step
//          lines placed between them by step)
std::vector<Panel> make_panels(const std::vector<Run>& runs, const std::string& x);

// The x axis's label: "step", "epoch" or "time (s)".
std::string x_label(const std::string& x);

// Whether this gradus was built with cairo (otherwise render() throws, saying so).
bool can_render();
// Draws the panels in a grid under a legend of the runs (colours) into `path`: a PNG, or an SVG
// when the name ends in .svg. IOError when the file cannot be written.
void render(const std::vector<Panel>& panels, const std::vector<std::string>& run_names,
            const std::string& x_label, const std::string& path);

}  // namespace gradus::cli::plot
