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

}  // namespace gradus::cli
