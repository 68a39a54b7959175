// gradus plot: the curves of one or more training runs (their --metrics files) in one image.
#include "plot.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <set>

#include "commands.h"
#include "gradus/core/error.h"

namespace gradus::cli {

void add_plot_command(CLI::App& app, PlotOptions& o) {
  CLI::App* c = app.add_subcommand(
      "plot",
      "Draw the loss, accuracy, throughput, memory, GPU use and power of training runs "
      "(their --metrics files) into a PNG or SVG");
  c->add_option("files", o.inputs, "Metrics JSONL files, one run each (overlaid)")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("-o,--output", o.output, "The image to write: NAME.png or NAME.svg")
      ->required()
      ->check(CLI::Validator(
          [](std::string& path) -> std::string {
            const size_t dot = path.rfind('.');
            const std::string ext = dot == std::string::npos ? "" : path.substr(dot);
            if (ext == ".png" || ext == ".svg") return {};
            return "'" + path + "' must end in .png or .svg";
          },
          "FILE"));
  c->add_option("--x", o.x, "The x axis: step, epoch or time (seconds)")
      ->check(CLI::IsMember({"step", "epoch", "time"}))
      ->capture_default_str();
}

int run_plot(const PlotOptions& o) {
  GRADUS_CHECK(plot::can_render(), Error,
               "plot: this gradus was built without cairo; install it (Debian: apt-get install "
               "libcairo2-dev) and configure again");
  std::vector<plot::Run> runs;
  std::vector<std::string> names;
  std::set<std::string> seen;
  bool repeated = false;
  for (const std::string& path : o.inputs) {
    runs.push_back(plot::read_run(path));
    if (runs.back().lines.empty()) {
      std::fprintf(stderr, "gradus plot: warning: %s has no metrics lines\n", path.c_str());
    }
    repeated = repeated || !seen.insert(runs.back().name).second;
  }
  // The legend names runs by file name, or by the paths given when two files share a name.
  for (size_t i = 0; i < runs.size(); ++i) names.push_back(repeated ? o.inputs[i] : runs[i].name);
  const std::vector<plot::Panel> panels = plot::make_panels(runs, o.x);
  GRADUS_CHECK(!panels.empty(), ValueError, "plot: nothing to plot: no line of the ",
               runs.size() == 1 ? "file" : "files",
               " has a loss, accuracy, throughput, memory, GPU or learning-rate value with an x (",
               o.x == "time" ? "elapsed_s or epoch_seconds" : o.x, ")");
  plot::render(panels, names, plot::x_label(o.x), o.output);
  std::string titles;
  for (const plot::Panel& p : panels) titles += (titles.empty() ? "" : ", ") + p.title;
  std::printf("plot: wrote %s: %zu panel%s (%s) for %zu run%s\n", o.output.c_str(), panels.size(),
              panels.size() == 1 ? "" : "s", titles.c_str(), runs.size(),
              runs.size() == 1 ? "" : "s");
  return 0;
}

}  // namespace gradus::cli
