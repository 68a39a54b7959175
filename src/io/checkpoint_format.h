// What a checkpoint file and a checkpoint shard file share: the CRC-32s that make every flipped
// bit detectable, and how problems are reported (private to gradus_io).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gradus/io/checkpoint.h"
#include "gradus/io/safetensors.h"

namespace gradus::io::ckpt {

inline constexpr const char* kChecksumsKey = "checksums";
inline constexpr const char* kMetadataCrcKey = "metadata_crc32";

// zlib's CRC-32 of a tensor's bytes (contiguous, little-endian, as written to the file).
uint32_t tensor_crc32(const Tensor& t);
// Adds "checksums" (tensor name -> CRC-32) and then "metadata_crc32" (of every other entry, as the
// JSON object of them in key order) to `meta`.
void seal_metadata(std::map<std::string, std::string>& meta,
                   const std::vector<std::pair<std::string, Tensor>>& tensors);
// What a sealed file's checksums and values say is wrong (damaged metadata, a tensor without a
// checksum or with a wrong one, non-finite values); empty when nothing is.
std::vector<std::string> integrity_problems(const SafetensorsFile& f, bool sealed);
// Throws ValueError naming the first tensor with non-finite values: such a checkpoint would make
// every resume fail at the same step (or train on garbage).
void refuse_nonfinite(const std::vector<std::pair<std::string, Tensor>>& tensors, int64_t step);
// The first problems, joined for one message.
std::string join_problems(const std::vector<std::string>& problems);

// Writes dir/ckpt-<step>.safetensors (format `version`, with `extra` metadata entries), then
// prunes to keep_last_k: save_checkpoint, and a set's index.
std::string write_checkpoint(const std::string& dir, int64_t step, const TrainingState& state,
                             const std::map<std::string, std::string>& extra, int version,
                             int keep_last_k);

// ---- sets (checkpoint_set.cpp) ----
inline constexpr const char* kShardsKey = "shards";
inline constexpr int kSetFormatVersion = 3;
// Whether a checkpoint's metadata makes it the index of a set.
bool is_set_index(const std::map<std::string, std::string>& meta);
// What the set's shard files' headers say is wrong (missing, truncated, another set's): cheap,
// no tensor data is read.
std::vector<std::string> set_header_problems(const std::string& index_path,
                                             const std::map<std::string, std::string>& meta);
// Reads and verifies every shard of the set (checksums, set id, exact coverage) and adds the
// whole tensors to `s`, the model's in the index's order. IOError naming the shard and the problem.
void assemble_checkpoint_set(const std::string& index_path,
                             const std::map<std::string, std::string>& meta, TrainingState& s);
// Deletes the shard files of the set at `step` in dir; whether any was deleted.
bool remove_checkpoint_shards(const std::string& dir, int64_t step);

}  // namespace gradus::io::ckpt
