// Sharded checkpoint sets on top of the checkpoint file format. See checkpoint_set.h.
#include "gradus/io/checkpoint_set.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "gradus/io/atomic_file.h"
#include "gradus/io/safetensors.h"
#include "gradus/ops.h"
#include "io/checkpoint_format.h"

namespace gradus::io {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kShardFormat = "gradus.checkpoint.shard";
constexpr const char* kPiecesKey = "pieces";

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string step_prefix(int64_t step) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "ckpt-%010lld.shard-", static_cast<long long>(step));
  return buf;
}

// The step of a shard file's name ("ckpt-<digits>.shard-....safetensors"); -1 for any other name
// (temp files end in ".tmp.<pid>").
int64_t shard_step(const std::string& name) {
  static const std::string prefix = "ckpt-", middle = ".shard-", suffix = ".safetensors";
  const size_t at = name.find(middle);
  if (!name.starts_with(prefix) || !name.ends_with(suffix) || at == std::string::npos) return -1;
  int64_t step = -1;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + at;
  auto [p, ec] = std::from_chars(first, last, step);
  return ec == std::errc() && p == last && last > first ? step : -1;
}

json ranges_json(const ShardRanges& ranges) {
  json j = json::object();
  for (const auto& [name, range] : ranges) j[name] = {range.first, range.second};
  return j;
}

// What the index says of its set.
struct SetIndex {
  std::string id;
  int world = 0;
  int64_t step = 0;
  std::vector<ShardedTensor> tensors;
  std::vector<json> pieces;  // per rank: name -> [begin, end]
  std::vector<std::string> model_order;
};

SetIndex parse_index(const std::string& path, const std::map<std::string, std::string>& meta) {
  SetIndex index;
  try {
    const json j = json::parse(meta.at(ckpt::kShardsKey));
    index.id = j.at("set").get<std::string>();
    index.world = j.at("world").get<int>();
    for (const json& t : j.at("tensors")) {
      index.tensors.push_back({t.at(0).get<std::string>(),
                               dtype_from_name(t.at(1).get<std::string>()),
                               t.at(2).get<std::vector<int64_t>>()});
    }
    for (const json& p : j.at("pieces")) index.pieces.push_back(p);
    index.model_order = j.at("model_order").get<std::vector<std::string>>();
    index.step = std::stoll(meta.at("step"));
  } catch (const std::exception& e) {
    throw IOError(detail::str_cat(path, ": metadata '", ckpt::kShardsKey,
                                  "' of the checkpoint set is unreadable: ", e.what()));
  }
  GRADUS_CHECK(index.world >= 1 && !index.id.empty() &&
                   index.pieces.size() == static_cast<size_t>(index.world),
               IOError, path, ": metadata '", ckpt::kShardsKey, "' names a set of ", index.world,
               " shard(s) with id '", index.id, "'");
  return index;
}

// Empty when the shard's header (metadata) says it is rank `rank`'s of the set; what is wrong
// otherwise.
std::string shard_identity_problem(const std::map<std::string, std::string>& meta, int64_t step,
                                   int rank, int world, const std::string& set_id) {
  auto get = [&meta](const char* key) {
    auto it = meta.find(key);
    return it == meta.end() ? std::string("(none)") : it->second;
  };
  if (get("format") != kShardFormat) return "not a gradus checkpoint shard";
  if (get("set") != set_id) {
    return "it belongs to another set (id " + get("set") + ", the index's is " + set_id + ")";
  }
  if (get("step") != std::to_string(step) || get("rank") != std::to_string(rank) ||
      get("world") != std::to_string(world)) {
    return "its metadata says step " + get("step") + ", rank " + get("rank") + " of " +
           get("world");
  }
  return {};
}

std::string shard_path(const std::string& dir, int64_t step, int rank, int world) {
  return (fs::path(dir) / checkpoint_shard_filename(step, rank, world)).string();
}

// Empty when rank r's shard file of the set exists, is complete (its header checks against its
// size) and says it is that shard; what is wrong otherwise. Reads the header only.
std::string shard_header_problem(const std::string& dir, int64_t step, int rank, int world,
                                 const std::string& set_id) {
  try {
    const SafetensorsHeader h = read_safetensors_header(shard_path(dir, step, rank, world));
    return shard_identity_problem(h.metadata, step, rank, world, set_id);
  } catch (const Error& e) {
    return e.what();
  }
}

// How a shard is named in messages about its set.
std::string where(const std::string& index_path, int64_t step, int rank, int world) {
  return detail::str_cat(index_path, ": shard ", rank, " of ", world, " (",
                         checkpoint_shard_filename(step, rank, world), ")");
}

}  // namespace

std::string checkpoint_shard_filename(int64_t step, int rank, int world) {
  GRADUS_CHECK(step >= 0 && world >= 1 && rank >= 0 && rank < world, ValueError,
               "checkpoint shard: step ", step, ", rank ", rank, " of ", world);
  char buf[80];
  std::snprintf(buf, sizeof buf, "ckpt-%010lld.shard-%05d-of-%05d.safetensors",
                static_cast<long long>(step), rank, world);
  return buf;
}

std::string save_checkpoint_shard(const std::string& dir, int64_t step, int rank, int world,
                                  const std::string& set_id,
                                  const std::vector<TensorPiece>& pieces) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  ShardRanges ranges;
  for (const TensorPiece& p : pieces) {
    GRADUS_CHECK(p.begin >= 0 && p.begin <= p.end && p.end <= numel_of(p.shape) &&
                     p.values.numel() == p.end - p.begin,
                 ValueError, "checkpoint shard: the piece of '", p.name, "' holds ",
                 p.values.numel(), " elements for [", p.begin, ", ", p.end, ") of ",
                 shape_str(p.shape));
    GRADUS_CHECK(ranges.emplace(p.name, std::make_pair(p.begin, p.end)).second, ValueError,
                 "checkpoint shard: two pieces of '", p.name, "'");
    tensors.emplace_back(p.name, p.values.reshape({p.end - p.begin}));
  }
  ckpt::refuse_nonfinite(tensors, step);
  std::map<std::string, std::string> meta{{"format", kShardFormat},
                                          {"format_version", "1"},
                                          {"step", std::to_string(step)},
                                          {"set", set_id},
                                          {"rank", std::to_string(rank)},
                                          {"world", std::to_string(world)},
                                          {kPiecesKey, ranges_json(ranges).dump()}};
  ckpt::seal_metadata(meta, tensors);
  std::error_code ec;
  fs::create_directories(dir, ec);
  GRADUS_CHECK(!ec, IOError, dir, ": cannot create checkpoint directory: ", ec.message());
  const std::string path = shard_path(dir, step, rank, world);
  save_safetensors(path, tensors, meta);  // atomic
  return path;
}

std::string save_checkpoint_index(const std::string& dir, int64_t step, const TrainingState& state,
                                  const std::string& set_id,
                                  const std::vector<ShardedTensor>& sharded,
                                  const std::vector<ShardRanges>& ranges_by_rank,
                                  const std::vector<std::string>& model_order, int keep_last_k) {
  json tensors = json::array();
  for (const ShardedTensor& t : sharded) tensors.push_back({t.name, dtype_name(t.dtype), t.shape});
  json pieces = json::array();
  for (const ShardRanges& ranges : ranges_by_rank) pieces.push_back(ranges_json(ranges));
  const int world = static_cast<int>(ranges_by_rank.size());
  const json shards{{"set", set_id},
                    {"world", world},
                    {"tensors", tensors},
                    {"pieces", pieces},
                    {"model_order", model_order}};
  return ckpt::write_checkpoint(dir, step, state, {{ckpt::kShardsKey, shards.dump()}},
                                ckpt::kSetFormatVersion, keep_last_k);
}

std::optional<CheckpointSetInfo> checkpoint_set_info(
    const std::string& index_path, const std::map<std::string, std::string>& metadata) {
  if (!ckpt::is_set_index(metadata)) return std::nullopt;
  SetIndex index = parse_index(index_path, metadata);
  return CheckpointSetInfo{index.id, index.world, std::move(index.tensors)};
}

std::vector<int> missing_checkpoint_shards(const std::string& dir, int64_t step, int world,
                                           const std::string& set_id) {
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    if (!shard_header_problem(dir, step, r, world, set_id).empty()) missing.push_back(r);
  }
  return missing;
}

int remove_orphan_checkpoint_shards(const std::string& dir) {
  std::set<int64_t> indexed;
  for (const auto& [step, path] : list_checkpoints(dir)) indexed.insert(step);
  int removed = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const int64_t step = shard_step(e.path().filename().string());
    if (step < 0 || indexed.count(step) != 0) continue;
    std::error_code ec2;
    if (fs::remove(e.path(), ec2)) ++removed;
  }
  if (removed > 0) fsync_directory(dir);
  return removed;
}

namespace ckpt {

bool is_set_index(const std::map<std::string, std::string>& meta) {
  return meta.count(kShardsKey) != 0;
}

std::vector<std::string> set_header_problems(const std::string& index_path,
                                             const std::map<std::string, std::string>& meta) {
  const SetIndex index = parse_index(index_path, meta);
  const std::string dir = fs::path(index_path).parent_path().string();
  std::vector<std::string> problems;
  for (int r = 0; r < index.world; ++r) {
    const std::string wrong = shard_header_problem(dir, index.step, r, index.world, index.id);
    if (!wrong.empty())
      problems.push_back(where(index_path, index.step, r, index.world) + ": " + wrong);
  }
  return problems;
}

void assemble_checkpoint_set(const std::string& index_path,
                             const std::map<std::string, std::string>& meta, TrainingState& s) {
  const SetIndex index = parse_index(index_path, meta);
  const std::string dir = fs::path(index_path).parent_path().string();
  struct Whole {
    Tensor flat;
    const ShardedTensor* info;
    std::vector<std::pair<int64_t, int64_t>> covered;
  };
  std::map<std::string, Whole> wholes;
  for (const ShardedTensor& t : index.tensors) {
    Whole& w = wholes[t.name];
    w.flat = zeros({numel_of(t.shape)}, {.dtype = t.dtype});
    w.info = &t;
  }
  for (int r = 0; r < index.world; ++r) {
    const std::string at = where(index_path, index.step, r, index.world);
    SafetensorsFile f;
    try {
      f = read_safetensors(shard_path(dir, index.step, r, index.world));
    } catch (const Error& e) {
      throw IOError(at + ": " + e.what());
    }
    const std::string wrong =
        shard_identity_problem(f.metadata, index.step, r, index.world, index.id);
    GRADUS_CHECK(wrong.empty(), IOError, at, ": ", wrong);
    const std::vector<std::string> problems = integrity_problems(f, /*sealed=*/true);
    GRADUS_CHECK(problems.empty(), IOError, at, ": ", join_problems(problems));
    json ranges;
    try {
      ranges = json::parse(f.metadata.at(kPiecesKey));
    } catch (const std::exception& e) {
      throw IOError(at + ": metadata 'pieces' is unreadable: " + e.what());
    }
    GRADUS_CHECK(ranges == index.pieces[static_cast<size_t>(r)], IOError, at,
                 ": its pieces are not those the index names for it");
    for (const auto& [name, t] : f.tensors) {
      auto w = wholes.find(name);
      GRADUS_CHECK(w != wholes.end(), IOError, at, ": holds '", name,
                   "', which the index does not list");
      GRADUS_CHECK(ranges.contains(name) && ranges[name].is_array() && ranges[name].size() == 2,
                   IOError, at, ": no range for '", name, "'");
      const int64_t begin = ranges[name][0].get<int64_t>(), end = ranges[name][1].get<int64_t>();
      const int64_t numel = w->second.flat.numel();
      GRADUS_CHECK(t.dtype() == w->second.info->dtype && begin >= 0 && begin <= end &&
                       end <= numel && t.numel() == end - begin,
                   IOError, at, ": the piece of '", name, "' (", dtype_name(t.dtype()), ", ",
                   t.numel(), " elements for [", begin, ", ", end, ")) does not fit its ",
                   dtype_name(w->second.info->dtype), " tensor of ", numel, " elements");
      const size_t bytes = t.element_size();
      if (end > begin) {
        std::memcpy(static_cast<char*>(w->second.flat.raw_data()) + begin * bytes, t.raw_data(),
                    static_cast<size_t>(end - begin) * bytes);
      }
      w->second.covered.emplace_back(begin, end);
    }
  }
  // Every element in exactly one piece.
  for (auto& [name, w] : wholes) {
    std::sort(w.covered.begin(), w.covered.end());
    int64_t next = 0;
    for (const auto& [begin, end] : w.covered) {
      GRADUS_CHECK(begin >= next, IOError, index_path, ": the shards hold elements [", begin, ", ",
                   std::min(end, next), ") of '", name, "' twice");
      GRADUS_CHECK(begin == next, IOError, index_path, ": no shard holds elements [", next, ", ",
                   begin, ") of '", name, "'");
      next = end;
    }
    GRADUS_CHECK(next == w.flat.numel(), IOError, index_path, ": no shard holds elements [", next,
                 ", ", w.flat.numel(), ") of '", name, "'");
  }
  size_t model_tensors = s.model.size();
  for (const auto& [name, w] : wholes) model_tensors += name.starts_with("model.") ? 1 : 0;
  nn::StateDict model;
  for (const std::string& name : index.model_order) {
    if (auto w = wholes.find("model." + name); w != wholes.end()) {
      model.insert(name, w->second.flat.reshape(w->second.info->shape));
    } else if (const Tensor* t = s.model.find(name)) {
      model.insert(name, *t);
    } else {
      throw IOError(detail::str_cat(index_path, ": the model's '", name,
                                    "' is neither in the index nor in its shards"));
    }
  }
  GRADUS_CHECK(model.size() == model_tensors, IOError, index_path,
               ": the index's model order does not list every model tensor");
  s.model = std::move(model);
  for (auto& [name, w] : wholes) {
    const Tensor whole = w.flat.reshape(w.info->shape);
    if (name.starts_with("optim.")) {
      s.optimizer.tensors[name.substr(6)] = whole;
    } else if (name.starts_with("extra.")) {
      s.extra_tensors[name.substr(6)] = whole;
    } else if (!name.starts_with("model.")) {
      throw IOError(detail::str_cat(index_path, ": sharded tensor '", name,
                                    "' has none of the prefixes model., optim., extra."));
    }
  }
}

bool remove_checkpoint_shards(const std::string& dir, int64_t step) {
  const std::string prefix = step_prefix(step);
  bool removed = false;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(prefix) || shard_step(name) != step) continue;
    std::error_code ec2;
    removed = fs::remove(e.path(), ec2) || removed;
  }
  return removed;
}

}  // namespace ckpt

}  // namespace gradus::io
