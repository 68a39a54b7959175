// What every training task writes besides checkpoints: the --metrics file (JSON lines, appended)
// and the --save file. Both are checked before training starts, so a bad path fails in seconds
// rather than after the run.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace gradus::cli {

class MetricsFile {
 public:
  // An empty path writes nothing. IOError when the file cannot be opened for appending.
  explicit MetricsFile(const std::string& path);
  // One line, flushed; IOError when the write fails (a full disk).
  void write(const nlohmann::ordered_json& line);

 private:
  std::string path_;
  std::ofstream out_;
};

// IOError when --save's directory does not exist, or (probe) a file cannot be created there.
void check_save_path(const std::string& save, bool probe);

// How the run is spread: {"world": W, "data": D, "pipeline": P, "tensor": T, "strategy": S} for
// every metrics line, and the same in words for the run's header line. S is the data-parallel
// strategy's registry name ("local" for one replica).
struct RunLayout {
  int world = 1, data = 1, pipeline = 1, tensor = 1;
  std::string strategy = "local";
};
nlohmann::ordered_json layout_json(const RunLayout& layout);
std::string layout_text(const RunLayout& layout);  // "layout: 4 ranks = 2 data x 2 pipeline x ..."

}  // namespace gradus::cli
