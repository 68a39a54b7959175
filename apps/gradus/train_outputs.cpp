// The metrics file and the --save path check (train_outputs.h).
#include "train_outputs.h"

#include <filesystem>

#include "gradus/core/error.h"
#include "gradus/io/dir_lock.h"

namespace gradus::cli {

MetricsFile::MetricsFile(const std::string& path) : path_(path) {
  if (path.empty()) return;
  out_.open(path, std::ios::app);
  GRADUS_CHECK(out_.good(), IOError, "train: cannot open the metrics file '", path,
               "' for appending");
}

void MetricsFile::write(const nlohmann::ordered_json& line) {
  if (!out_.is_open()) return;
  out_ << line.dump() << '\n';
  out_.flush();
  GRADUS_CHECK(out_.good(), IOError, "train: writing the metrics file '", path_, "' failed");
}

void check_save_path(const std::string& save, bool probe) {
  if (save.empty()) return;
  const std::filesystem::path parent = std::filesystem::path(save).parent_path();
  std::error_code ec;
  GRADUS_CHECK(parent.empty() || std::filesystem::is_directory(parent, ec), IOError,
               "train: --save ", save, ": the directory '", parent.string(), "' does not exist");
  GRADUS_CHECK(!std::filesystem::is_directory(save, ec), IOError, "train: --save ", save,
               " is a directory; give the path of the weights file to write (e.g. ", save,
               "/model.safetensors)");
  if (probe) io::probe_writable_directory(parent.string(), "train: --save " + save, false);
}

nlohmann::ordered_json layout_json(const RunLayout& l) {
  return {{"world", l.world},
          {"data", l.data},
          {"pipeline", l.pipeline},
          {"tensor", l.tensor},
          {"strategy", l.strategy}};
}

std::string layout_text(const RunLayout& l) {
  return "layout: " + std::to_string(l.world) + (l.world == 1 ? " rank = " : " ranks = ") +
         std::to_string(l.data) + " data x " + std::to_string(l.pipeline) + " pipeline x " +
         std::to_string(l.tensor) + " tensor, strategy " + l.strategy;
}

}  // namespace gradus::cli
