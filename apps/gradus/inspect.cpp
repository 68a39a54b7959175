// gradus inspect FILE.safetensors: validates the file (the same strict checks every gradus reader
// applies: header bounds, JSON, dtypes, shapes, offsets against the file size) and lists its
// tensors (name, dtype, shape, bytes) and metadata. For a gradus checkpoint it also says where
// the run stands. --values reads the tensor data too and counts NaN/Inf per floating tensor.
// An invalid file throws IOError (main prints it, exit code 1).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "gradus/core/dtype.h"
#include "gradus/core/shape.h"
#include "gradus/io/checkpoint.h"
#include "gradus/io/checkpoint_set.h"
#include "gradus/io/safetensors.h"
#include "gradus/ops.h"

namespace gradus::cli {

namespace {

// Metadata values can be long (a checkpoint's config): the table shows the start.
std::string shorten(const std::string& s, size_t n = 160) {
  return s.size() <= n ? s : s.substr(0, n) + "... (" + std::to_string(s.size()) + " chars)";
}

// Non-finite elements of a floating tensor (-1 for other dtypes).
int64_t count_nonfinite(const Tensor& t) {
  return is_floating(t.dtype()) ? io::count_nonfinite(t) : -1;
}

}  // namespace

// --compare: the relative difference ||a - b|| / ||a|| (float64, 2-norms) of every tensor, the
// largest last ("max_relative_difference=<value>", or one JSON object).
// The tensors of a file; of a sharded checkpoint set's index, the set's whole tensors under their
// names in a one-file checkpoint.
io::SafetensorsFile read_tensors(const std::string& path) {
  io::SafetensorsFile f = io::read_safetensors(path);
  if (!io::checkpoint_set_info(path, f.metadata)) return f;
  const io::TrainingState s = io::load_checkpoint(path);
  f.tensors.clear();
  for (const auto& [name, t] : s.model) f.tensors.emplace_back("model." + name, t);
  for (const auto& [name, t] : s.optimizer.tensors) f.tensors.emplace_back("optim." + name, t);
  for (const auto& [name, t] : s.extra_tensors) f.tensors.emplace_back("extra." + name, t);
  return f;
}

int run_compare(const InspectOptions& o) {
  const io::SafetensorsFile a = read_tensors(o.path), b = read_tensors(o.compare);
  GRADUS_CHECK(a.tensors.size() == b.tensors.size(), ValueError, "inspect --compare: ", o.path,
               " holds ", a.tensors.size(), " tensors, ", o.compare, " ", b.tensors.size());
  nlohmann::ordered_json per_tensor = nlohmann::ordered_json::object();
  double worst = 0;
  for (const auto& [name, ta] : a.tensors) {
    const Tensor* found = b.find(name);
    GRADUS_CHECK(found != nullptr, ValueError, "inspect --compare: ", o.compare, " has no tensor '",
                 name, "'");
    const Tensor& tb = *found;
    GRADUS_CHECK(ta.sizes() == tb.sizes(), ShapeError, "inspect --compare: '", name, "' is ",
                 shape_str(ta.sizes()), " in ", o.path, " and ", shape_str(tb.sizes()), " in ",
                 o.compare);
    const Tensor x = ta.to(DType::f64), y = tb.to(DType::f64);
    const double norm = std::sqrt(sum(square(x)).item());
    const double diff = std::sqrt(sum(square(sub(x, y))).item());
    const double rel = norm > 0 ? diff / norm : diff;
    worst = std::max(worst, rel);
    per_tensor[name] = rel;
    if (!o.json) std::printf("%-48s %.3e\n", name.c_str(), rel);
  }
  if (o.json) {
    std::printf("%s\n", nlohmann::ordered_json({{"file", o.path},
                                                {"compare", o.compare},
                                                {"relative_difference", per_tensor},
                                                {"max_relative_difference", worst}})
                            .dump()
                            .c_str());
  } else {
    std::printf("max_relative_difference=%.6e\n", worst);
  }
  return 0;
}

int run_inspect(const InspectOptions& o) {
  if (!o.compare.empty()) return run_compare(o);
  const io::SafetensorsHeader h = io::read_safetensors_header(o.path);
  std::vector<int64_t> nonfinite;
  if (o.values) {
    const io::SafetensorsFile f = io::read_safetensors(o.path);
    for (const io::SafetensorsEntry& e : h.entries)
      nonfinite.push_back(count_nonfinite(f.at(e.name)));
  }
  uint64_t data_bytes = 0;
  for (const io::SafetensorsEntry& e : h.entries) data_bytes += e.end - e.begin;
  auto meta = [&](const char* key) {
    auto it = h.metadata.find(key);
    return it == h.metadata.end() ? std::string() : it->second;
  };
  const bool checkpoint = meta("format") == "gradus.checkpoint";
  // A checkpoint is verified: every tensor's and the metadata's CRC-32, finite values.
  const std::vector<std::string> problems =
      checkpoint ? io::verify_checkpoint(o.path) : std::vector<std::string>{};
  const bool has_checksums = h.metadata.count("checksums") > 0;
  const std::optional<io::CheckpointSetInfo> set =
      checkpoint ? io::checkpoint_set_info(o.path, h.metadata) : std::nullopt;

  if (o.json) {
    nlohmann::ordered_json j;
    j["file"] = o.path;
    j["valid"] = true;
    j["header_bytes"] = h.data_start - 8;
    j["data_bytes"] = data_bytes;
    j["tensors"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < h.entries.size(); ++i) {
      const io::SafetensorsEntry& e = h.entries[i];
      nlohmann::ordered_json t = {{"name", e.name},
                                  {"dtype", io::safetensors_dtype_code(e.dtype)},
                                  {"shape", e.shape},
                                  {"bytes", e.end - e.begin},
                                  {"data_offsets", {e.begin, e.end}}};
      if (o.values && nonfinite[i] >= 0) t["nonfinite"] = nonfinite[i];
      j["tensors"].push_back(t);
    }
    j["metadata"] = h.metadata;
    if (set) {
      j["shards"] = set->world;
      j["sharded_tensors"] = nlohmann::ordered_json::array();
      for (const io::ShardedTensor& t : set->tensors) {
        j["sharded_tensors"].push_back(
            {{"name", t.name}, {"dtype", io::safetensors_dtype_code(t.dtype)}, {"shape", t.shape}});
      }
    }
    if (checkpoint) {
      j["verified"] = problems.empty();
      j["problems"] = problems;
    }
    std::printf("%s\n", j.dump().c_str());
    return problems.empty() ? 0 : 1;
  }

  std::printf("%s: valid safetensors file, %zu tensors, %llu bytes of data, %llu-byte header\n",
              o.path.c_str(), h.entries.size(), static_cast<unsigned long long>(data_bytes),
              static_cast<unsigned long long>(h.data_start - 8));
  if (meta("format") == "gradus.checkpoint.shard") {
    std::printf(
        "gradus checkpoint shard: rank %s of %s of the set at step %s (id %s); its index, "
        "%s.safetensors, verifies the whole set\n",
        meta("rank").c_str(), meta("world").c_str(), meta("step").c_str(), meta("set").c_str(),
        o.path.substr(0, o.path.rfind(".shard-")).c_str());
  }
  if (checkpoint) {
    std::printf("gradus checkpoint: step %s, next batch %s of epoch %s (0-based), optimizer %s\n",
                meta("step").c_str(), meta("batch_index").c_str(), meta("epoch").c_str(),
                meta("optim.type").empty() ? "none" : meta("optim.type").c_str());
  }
  if (set) {
    std::printf(
        "sharded checkpoint set of %d shard(s) (%s ...): %zu tensors in the shards, %zu in "
        "this index\n",
        set->world, io::checkpoint_shard_filename(std::stoll(meta("step")), 0, set->world).c_str(),
        set->tensors.size(), h.entries.size());
  }
  size_t width = 4;
  for (const io::SafetensorsEntry& e : h.entries) width = std::max(width, e.name.size());
  if (set) {
    for (const io::ShardedTensor& t : set->tensors) width = std::max(width, t.name.size());
  }
  std::printf("%-*s  %-5s  %-20s  %12s%s\n", static_cast<int>(width), "name", "dtype", "shape",
              "bytes", o.values ? "  nonfinite" : "");
  for (size_t i = 0; i < h.entries.size(); ++i) {
    const io::SafetensorsEntry& e = h.entries[i];
    std::string extra;
    if (o.values) extra = nonfinite[i] < 0 ? "  -" : "  " + std::to_string(nonfinite[i]);
    std::printf("%-*s  %-5s  %-20s  %12llu%s\n", static_cast<int>(width), e.name.c_str(),
                io::safetensors_dtype_code(e.dtype), shape_str(e.shape).c_str(),
                static_cast<unsigned long long>(e.end - e.begin), extra.c_str());
  }
  if (set) {
    for (const io::ShardedTensor& t : set->tensors) {
      std::printf("%-*s  %-5s  %-20s  %12s\n", static_cast<int>(width), t.name.c_str(),
                  io::safetensors_dtype_code(t.dtype), shape_str(t.shape).c_str(), "(sharded)");
    }
  }
  if (!h.metadata.empty()) {
    std::printf("metadata:\n");
    for (const auto& [k, v] : h.metadata) std::printf("  %s: %s\n", k.c_str(), shorten(v).c_str());
  }
  if (checkpoint) {
    if (problems.empty()) {
      std::printf("verified: %s, every value finite\n",
                  set             ? "every shard's and the index's CRC-32s match, the shards hold "
                                    "every element of every sharded tensor once"
                  : has_checksums ? "every tensor's and the metadata's CRC-32 match"
                                  : "no checksums (format 1)");
    } else {
      std::fprintf(stderr, "%s: DAMAGED checkpoint, do not resume from it:\n", o.path.c_str());
      for (const std::string& p : problems) std::fprintf(stderr, "  %s\n", p.c_str());
    }
  }
  return problems.empty() ? 0 : 1;
}

}  // namespace gradus::cli
