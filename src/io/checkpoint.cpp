// Training checkpoints on top of safetensors + AtomicFile. See checkpoint.h for the file layout.
#include "gradus/io/checkpoint.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>

#include "gradus/io/atomic_file.h"
#include "gradus/io/safetensors.h"
#include "io/checkpoint_format.h"

namespace gradus::io {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace ckpt {

uint32_t tensor_crc32(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  const size_t bytes = static_cast<size_t>(c.numel()) * c.element_size();
  uLong crc = crc32_z(0L, Z_NULL, 0);
  if (bytes > 0) crc = crc32_z(crc, static_cast<const Bytef*>(c.raw_data()), bytes);
  return static_cast<uint32_t>(crc);
}

namespace {
uint32_t metadata_crc32(const std::map<std::string, std::string>& meta) {
  std::map<std::string, std::string> covered = meta;
  covered.erase(kMetadataCrcKey);
  const std::string text = json(covered).dump();
  return static_cast<uint32_t>(
      crc32_z(crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(text.data()), text.size()));
}
}  // namespace

void seal_metadata(std::map<std::string, std::string>& meta,
                   const std::vector<std::pair<std::string, Tensor>>& tensors) {
  json sums = json::object();
  for (const auto& [name, t] : tensors) sums[name] = tensor_crc32(t);
  meta[kChecksumsKey] = sums.dump();
  meta[kMetadataCrcKey] = std::to_string(metadata_crc32(meta));
}

std::vector<std::string> integrity_problems(const SafetensorsFile& f, bool sealed) {
  std::vector<std::string> problems;
  if (sealed) {
    auto crc = f.metadata.find(kMetadataCrcKey);
    uint32_t stored = 0;
    const char* end = crc == f.metadata.end() ? nullptr : crc->second.data() + crc->second.size();
    if (crc == f.metadata.end() || std::from_chars(crc->second.data(), end, stored).ptr != end ||
        crc->second.empty()) {
      problems.push_back("metadata '" + std::string(kMetadataCrcKey) + "' is missing or invalid");
    } else if (stored != metadata_crc32(f.metadata)) {
      problems.push_back(
          "the metadata (step, data position, RNG, optimizer scalars, scheduler, config) is "
          "damaged: its CRC-32 does not match");
    }
    json sums;
    auto text = f.metadata.find(kChecksumsKey);
    try {
      if (text == f.metadata.end()) throw std::runtime_error("no 'checksums' entry");
      sums = json::parse(text->second);
    } catch (const std::exception& e) {
      problems.push_back(std::string("metadata 'checksums' is unreadable: ") + e.what());
      return problems;
    }
    for (const auto& [name, t] : f.tensors) {
      if (!sums.contains(name) || !sums[name].is_number_unsigned()) {
        problems.push_back("tensor '" + name + "' has no checksum");
      } else if (sums[name].get<uint64_t>() != tensor_crc32(t)) {
        problems.push_back("tensor '" + name + "' is damaged: its CRC-32 does not match");
      }
    }
  }
  for (const auto& [name, t] : f.tensors) {
    const int64_t bad = count_nonfinite(t);
    if (bad > 0) {
      problems.push_back("tensor '" + name + "' holds " + std::to_string(bad) +
                         " non-finite value(s)");
    }
  }
  return problems;
}

void refuse_nonfinite(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t step) {
  for (const auto& [name, t] : tensors) {
    const int64_t bad = count_nonfinite(t);
    GRADUS_CHECK(bad == 0, ValueError, "checkpoint: tensor '", name, "' holds ", bad,
                 " non-finite value(s) at step ", step,
                 "; the checkpoint was not written (training diverged: lower the learning rate)");
  }
}

std::string join_problems(const std::vector<std::string>& problems) {
  std::string out;
  for (size_t i = 0; i < problems.size() && i < 6; ++i) out += (i ? "; " : "") + problems[i];
  if (problems.size() > 6) out += "; and " + std::to_string(problems.size() - 6) + " more";
  return out;
}

}  // namespace ckpt

namespace {

constexpr const char* kFormat = "gradus.checkpoint";
// 2: CRC-32 of every tensor ("checksums") and of the metadata ("metadata_crc32"); what a
// single-file checkpoint is written as. 3: the index of a set (checkpoint_set.h).
constexpr int kFileFormatVersion = 2;
constexpr int kReadableVersion = ckpt::kSetFormatVersion;
constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimPrefix = "optim.";
constexpr const char* kExtraPrefix = "extra.";

// Doubles as JSON numbers; inf/nan (which JSON cannot hold) as the strings "inf", "-inf", "nan".
// nlohmann prints doubles with 17 significant digits, so values round-trip exactly.
std::string encode_scalars(const std::map<std::string, double>& values) {
  json j = json::object();
  for (const auto& [k, v] : values) {
    if (std::isfinite(v)) {
      j[k] = v;
    } else {
      j[k] = std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
    }
  }
  return j.dump();
}

std::map<std::string, double> decode_scalars(const std::string& text, const std::string& file,
                                             const std::string& key) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw IOError(detail::str_cat(file, ": metadata '", key, "' is not valid JSON: ", e.what()));
  }
  GRADUS_CHECK(j.is_object(), IOError, file, ": metadata '", key,
               "' must be a JSON object of numbers");
  std::map<std::string, double> out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const json& v = it.value();
    if (v.is_number()) {
      out[it.key()] = v.get<double>();
    } else if (v.is_string() && (v == "inf" || v == "-inf" || v == "nan")) {
      const std::string s = v.get<std::string>();
      out[it.key()] = s == "nan"   ? std::numeric_limits<double>::quiet_NaN()
                      : s == "inf" ? std::numeric_limits<double>::infinity()
                                   : -std::numeric_limits<double>::infinity();
    } else {
      throw IOError(detail::str_cat(file, ": metadata '", key, "': value of '", it.key(),
                                    "' must be a number, got ", v.dump()));
    }
  }
  return out;
}

// Parses the whole string as a decimal integer.
template <typename T>
bool parse_int(const std::string& s, T& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end && !s.empty();
}

// "ckpt-<digits>.safetensors" -> step; -1 when the name does not match exactly.
int64_t step_of_filename(const std::string& name) {
  static const std::string prefix = "ckpt-", suffix = ".safetensors";
  if (name.size() <= prefix.size() + suffix.size()) return -1;
  if (!name.starts_with(prefix)) return -1;
  if (!name.ends_with(suffix)) return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return -1;
  }
  int64_t step = -1;
  return parse_int(digits, step) ? step : -1;
}

const std::string& required(const std::map<std::string, std::string>& m, const char* key,
                            const std::string& file) {
  auto it = m.find(key);
  GRADUS_CHECK(it != m.end(), IOError, file, ": checkpoint metadata has no '", key, "' entry");
  return it->second;
}

int64_t required_int(const std::map<std::string, std::string>& m, const char* key,
                     const std::string& file) {
  const std::string& s = required(m, key, file);
  int64_t v = 0;
  GRADUS_CHECK(parse_int(s, v), IOError, file, ": checkpoint metadata '", key, "' is '", s,
               "', expected an integer");
  return v;
}

// Throws unless the metadata says this is a gradus checkpoint of a version we can read.
void check_format(const std::map<std::string, std::string>& meta, const std::string& file) {
  auto it = meta.find("format");
  GRADUS_CHECK(it != meta.end() && it->second == kFormat, IOError, file,
               ": not a gradus checkpoint (metadata 'format' is ",
               it == meta.end() ? std::string("missing") : "'" + it->second + "'", ", expected '",
               kFormat, "')");
  const int64_t version = required_int(meta, "format_version", file);
  GRADUS_CHECK(version >= 1 && version <= kReadableVersion, IOError, file,
               ": checkpoint format_version ", version, " is not supported by this gradus (reads ",
               "1..", kReadableVersion, "; written by a newer version?)");
}

// Fills every non-tensor field of `s` from the metadata (throws IOError naming what is wrong).
void read_checkpoint_metadata(const std::map<std::string, std::string>& meta,
                              const std::string& path, TrainingState& s) {
  check_format(meta, path);
  s.step = required_int(meta, "step", path);
  s.epoch = required_int(meta, "epoch", path);
  s.batch_index = required_int(meta, "batch_index", path);
  {
    const std::string& text = required(meta, "rng", path);
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      throw IOError(detail::str_cat(path, ": metadata 'rng' is not valid JSON: ", e.what()));
    }
    GRADUS_CHECK(j.is_object() && j.contains("seed") && j.contains("offset") &&
                     j["seed"].is_number_unsigned() && j["offset"].is_number_unsigned(),
                 IOError, path, ": metadata 'rng' must be {\"seed\": u64, \"offset\": u64}, got ",
                 text);
    s.rng.seed = j["seed"].get<uint64_t>();
    s.rng.offset = j["offset"].get<uint64_t>();
  }
  s.optimizer.type = required(meta, "optim.type", path);
  s.optimizer.scalars =
      decode_scalars(required(meta, "optim.scalars", path), path, "optim.scalars");
  s.scheduler = decode_scalars(required(meta, "scheduler", path), path, "scheduler");
  s.scaler = decode_scalars(required(meta, "scaler", path), path, "scaler");
  s.config = required(meta, "config", path);
  for (const auto& [k, v] : meta) {
    if (k.starts_with(kExtraPrefix)) s.extra[k.substr(std::strlen(kExtraPrefix))] = v;
  }
}

// Elements with an all-ones exponent (inf or NaN). Not an op: checkpoints are also written from
// forked or signal-interrupted processes where an OpenMP parallel region could deadlock.
template <typename Bits>
int64_t count_all_ones_exponent(const Tensor& t, Bits mask) {
  const Bits* p = static_cast<const Bits*>(t.raw_data());
  int64_t bad = 0;
  for (int64_t i = 0, n = t.numel(); i < n; ++i) bad += (p[i] & mask) == mask;
  return bad;
}

// Everything wrong with the contents of a checkpoint file that parsed as safetensors: metadata,
// checksums (format 2), non-finite weights or optimizer state. Empty when it is good.
std::vector<std::string> content_problems(const SafetensorsFile& f, const std::string& path) {
  std::vector<std::string> problems;
  TrainingState scratch;
  try {
    read_checkpoint_metadata(f.metadata, path, scratch);
  } catch (const Error& e) {
    problems.push_back(e.what());
    return problems;
  }
  const int64_t version = required_int(f.metadata, "format_version", path);
  for (std::string& p : ckpt::integrity_problems(f, version >= 2)) problems.push_back(p);
  return problems;
}

// Whether `path` is a gradus checkpoint whose header validates against its file size (and, for a
// set's index, so do its shards' headers). The header names every tensor's byte range and must
// account for the exact file size, so a truncated or partially copied file fails here without
// its data being read.
bool is_complete_checkpoint(const std::string& path) {
  try {
    SafetensorsHeader h = read_safetensors_header(path);
    TrainingState scratch;
    read_checkpoint_metadata(h.metadata, path, scratch);
    return !ckpt::is_set_index(h.metadata) || ckpt::set_header_problems(path, h.metadata).empty();
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

std::string checkpoint_filename(int64_t step) {
  GRADUS_CHECK(step >= 0, ValueError, "checkpoint: step must be non-negative, got ", step);
  char buf[48];
  std::snprintf(buf, sizeof buf, "ckpt-%010lld.safetensors", static_cast<long long>(step));
  return buf;
}

TrainingState capture_training_state(const nn::Module& model, const optim::Optimizer* optimizer,
                                     int64_t step, const optim::LRScheduler* scheduler) {
  TrainingState s;
  s.step = step;
  s.model = model.state_dict();
  if (optimizer != nullptr) s.optimizer = optimizer->state_dict();
  if (scheduler != nullptr) s.scheduler = scheduler->state_dict();
  s.rng = default_generator().state();
  return s;
}

void restore_training_state(const TrainingState& state, nn::Module& model,
                            optim::Optimizer* optimizer, optim::LRScheduler* scheduler,
                            bool restore_rng) {
  model.load_state_dict(state.model, /*strict=*/true);
  if (optimizer != nullptr) {
    GRADUS_CHECK(!state.optimizer.type.empty(), ValueError,
                 "restore_training_state: the checkpoint holds no optimizer state but an ",
                 optimizer->type_name(), " optimizer was given");
    optimizer->load_state_dict(state.optimizer);
  }
  if (scheduler != nullptr) {
    GRADUS_CHECK(!state.scheduler.empty(), ValueError,
                 "restore_training_state: the checkpoint holds no scheduler state but a ",
                 scheduler->type_name(), " scheduler was given");
    scheduler->load_state_dict(state.scheduler);
  }
  if (restore_rng) default_generator().set_state(state.rng);
}

std::string save_checkpoint(const std::string& dir, int64_t step, const TrainingState& state,
                            int keep_last_k) {
  return ckpt::write_checkpoint(dir, step, state, {}, kFileFormatVersion, keep_last_k);
}

std::string ckpt::write_checkpoint(const std::string& dir, int64_t step, const TrainingState& state,
                                   const std::map<std::string, std::string>& extra, int version,
                                   int keep_last_k) {
  const std::string name = checkpoint_filename(step);
  std::error_code ec;
  fs::create_directories(dir, ec);
  GRADUS_CHECK(!ec, IOError, dir, ": cannot create checkpoint directory: ", ec.message());
  const std::string path = (fs::path(dir) / name).string();

  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.reserve(state.model.size() + state.optimizer.tensors.size() + state.extra_tensors.size());
  for (const auto& [k, t] : state.model) tensors.emplace_back(kModelPrefix + k, t);
  for (const auto& [k, t] : state.optimizer.tensors) tensors.emplace_back(kOptimPrefix + k, t);
  for (const auto& [k, t] : state.extra_tensors) tensors.emplace_back(kExtraPrefix + k, t);

  ckpt::refuse_nonfinite(tensors, step);

  std::map<std::string, std::string> meta;
  meta["format"] = kFormat;
  meta["format_version"] = std::to_string(version);
  meta["step"] = std::to_string(step);
  meta["epoch"] = std::to_string(state.epoch);
  meta["batch_index"] = std::to_string(state.batch_index);
  meta["rng"] = json{{"seed", state.rng.seed}, {"offset", state.rng.offset}}.dump();
  meta["optim.type"] = state.optimizer.type;
  meta["optim.scalars"] = encode_scalars(state.optimizer.scalars);
  meta["scheduler"] = encode_scalars(state.scheduler);
  meta["scaler"] = encode_scalars(state.scaler);
  meta["config"] = state.config;
  for (const auto& [k, v] : state.extra) meta[kExtraPrefix + k] = v;
  for (const auto& [k, v] : extra) meta[k] = v;
  ckpt::seal_metadata(meta, tensors);

  save_safetensors(path, tensors, meta);  // atomic: complete under `path` or not there at all

  // Only after the new checkpoint is durable: a crash here leaves extra files, never too few.
  prune_checkpoints(dir, keep_last_k, step);
  return path;
}

void prune_checkpoints(const std::string& dir, int keep, int64_t keep_step) {
  if (keep <= 0) return;
  // Only complete checkpoints count towards K (a corrupt file must not push out a good one);
  // corrupt files are left alone for inspection.
  const auto all = list_checkpoints(dir);
  int kept = keep_step >= 0 ? 1 : 0;  // the one just written always stays
  bool removed = false;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->first == keep_step || !is_complete_checkpoint(it->second)) continue;
    if (++kept <= keep) continue;
    // The index first: a set without its index is no checkpoint, whatever is left of its shards.
    if (::unlink(it->second.c_str()) == 0) removed = true;
    removed = ckpt::remove_checkpoint_shards(dir, it->first) || removed;
  }
  if (removed) fsync_directory(dir);
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return out;  // no run has written here yet
  // Anything else (permission denied, not a directory) must not pass for "no checkpoint yet":
  // a --resume would silently start from step 0.
  GRADUS_CHECK(!ec, IOError, "cannot list the checkpoint directory '", dir, "': ", ec.message());
  for (const fs::directory_entry& e : it) {
    const int64_t step = step_of_filename(e.path().filename().string());
    if (step < 0) continue;  // includes every "*.tmp.<pid>" temp file
    std::error_code ec2;
    if (!e.is_regular_file(ec2)) continue;
    out.emplace_back(step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (is_complete_checkpoint(it->second)) return it->second;
  }
  return std::nullopt;  // none, or only corrupt/foreign ones
}

int64_t count_nonfinite(const Tensor& t) {
  if (!is_floating(t.dtype()) || t.numel() == 0) return 0;
  const Tensor c = t.to(Device::cpu()).contiguous();
  switch (c.dtype()) {
    case DType::f32:
      return count_all_ones_exponent<uint32_t>(c, 0x7f800000u);
    case DType::f64:
      return count_all_ones_exponent<uint64_t>(c, 0x7ff0000000000000ull);
    case DType::f16:
      return count_all_ones_exponent<uint16_t>(c, 0x7c00u);
    case DType::bf16:
      return count_all_ones_exponent<uint16_t>(c, 0x7f80u);
    default:
      return 0;
  }
}

std::vector<std::string> verify_checkpoint(const std::string& path) {
  try {
    const SafetensorsFile f = read_safetensors(path);
    std::vector<std::string> problems = content_problems(f, path);
    if (problems.empty() && ckpt::is_set_index(f.metadata)) {
      TrainingState scratch;
      ckpt::assemble_checkpoint_set(path, f.metadata, scratch);  // throws what is wrong
    }
    return problems;
  } catch (const Error& e) {
    return {e.what()};
  }
}

std::optional<GoodCheckpoint> latest_good_checkpoint(const std::string& dir) {
  GoodCheckpoint result;
  auto all = list_checkpoints(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      result.state = load_checkpoint(it->second);
      result.path = it->second;
      return result;
    } catch (const Error& e) {
      result.skipped.emplace_back(it->second, e.what());
    }
  }
  if (result.skipped.empty()) return std::nullopt;
  throw UnusableCheckpointsError(result.skipped);
}

UnusableCheckpointsError::UnusableCheckpointsError(
    std::vector<std::pair<std::string, std::string>> skipped)
    : IOError([&] {
        std::string m =
            "none of the " + std::to_string(skipped.size()) + " checkpoint(s) can be resumed from:";
        for (const auto& [p, why] : skipped) m += "\n  " + p + ": " + why;
        return m;
      }()),
      skipped_(std::move(skipped)) {}

TrainingState load_checkpoint(const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  const std::vector<std::string> problems = content_problems(f, path);
  GRADUS_CHECK(problems.empty(), IOError, path,
               ": unusable checkpoint: ", ckpt::join_problems(problems));
  TrainingState s;
  read_checkpoint_metadata(f.metadata, path, s);

  // Tensors come back in file order, which is the order they were saved in (model first, in
  // state_dict order), so the StateDict keeps PyTorch's registration order.
  for (auto& [name, t] : f.tensors) {
    if (name.starts_with(kModelPrefix)) {
      s.model.insert(name.substr(std::strlen(kModelPrefix)), t);
    } else if (name.starts_with(kOptimPrefix)) {
      s.optimizer.tensors[name.substr(std::strlen(kOptimPrefix))] = t;
    } else if (name.starts_with(kExtraPrefix)) {
      s.extra_tensors[name.substr(std::strlen(kExtraPrefix))] = t;
    } else {
      throw IOError(detail::str_cat(path, ": checkpoint tensor '", name,
                                    "' has none of the prefixes model., optim., extra."));
    }
  }
  if (ckpt::is_set_index(f.metadata)) ckpt::assemble_checkpoint_set(path, f.metadata, s);
  return s;
}

}  // namespace gradus::io
