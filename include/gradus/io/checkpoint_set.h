// Sharded checkpoints: one checkpoint as a set of files, one per rank, so that no rank gathers
// the model, and every rank writes its part at once.
//
//   ckpt-<step>.shard-<r>-of-<W>.safetensors   rank r's pieces of the sharded tensors
//   ckpt-<step>.safetensors                    the index, written last
//
// A piece is elements [begin, end) of a tensor's row-major flattening, stored 1-D under the
// tensor's checkpoint name ("model.<name>", "optim.state.<i>.<name>"); a shard's metadata names
// its set, its rank and every piece's range, and is sealed with CRC-32s like a checkpoint. The
// index is an ordinary checkpoint file (checkpoint.h, format_version 3) holding the run metadata
// and the tensors that are not sharded, plus metadata "shards": the set's id, its world size,
// every sharded tensor's name, dtype and shape, and the range of each that every shard holds. A set
// therefore exists only once its index does (the shards of a set whose index never appeared are
// removed on resume), is listed, pruned and found by the index's name, and loads as one checkpoint:
// load_checkpoint() on an index reads every shard, verifies it (checksums, set id, rank, its pieces
// those the index names, the pieces covering every tensor exactly once) and returns whole tensors,
// so a set resumes under any world size and layout. A missing or damaged shard makes the whole set
// unusable: latest_good_checkpoint falls back past it.
//
// The files of a set must be visible to the rank that writes the index (one file system).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gradus/io/checkpoint.h"

namespace gradus::io {

// Elements [begin, end) of the flattened tensor `name` (its checkpoint name) of shape `shape`.
struct TensorPiece {
  std::string name;
  Shape shape;
  int64_t begin = 0, end = 0;
  Tensor values;  // [end - begin]
};

// "ckpt-0000000042.shard-00001-of-00004.safetensors".
std::string checkpoint_shard_filename(int64_t step, int rank, int world);

// Writes rank's shard of set `set_id` atomically (refusing non-finite values, as
// save_checkpoint does); returns its path.
std::string save_checkpoint_shard(const std::string& dir, int64_t step, int rank, int world,
                                  const std::string& set_id,
                                  const std::vector<TensorPiece>& pieces);

// A tensor whose pieces are in the shards.
struct ShardedTensor {
  std::string name;  // checkpoint name
  DType dtype = DType::f32;
  Shape shape;
};
// Which elements [begin, end) of which tensors (by checkpoint name) one shard holds.
using ShardRanges = std::map<std::string, std::pair<int64_t, int64_t>>;
// Writes the index of the set once every shard is written: `state` holds the run metadata and
// the tensors that are not sharded; `sharded` the others, and `ranges_by_rank` (one per rank)
// what each shard holds of them; `model_order` is the model's state_dict names in order (the
// sharded and the others). Then prunes to keep_last_k as save_checkpoint does. Returns its path.
std::string save_checkpoint_index(const std::string& dir, int64_t step, const TrainingState& state,
                                  const std::string& set_id,
                                  const std::vector<ShardedTensor>& sharded,
                                  const std::vector<ShardRanges>& ranges_by_rank,
                                  const std::vector<std::string>& model_order, int keep_last_k);

// What an index says of its set; std::nullopt when the checkpoint is one file. IOError when the
// index's description of its set is unreadable.
struct CheckpointSetInfo {
  std::string id;
  int world = 0;
  std::vector<ShardedTensor> tensors;
};
std::optional<CheckpointSetInfo> checkpoint_set_info(
    const std::string& index_path, const std::map<std::string, std::string>& metadata);

// The ranks whose shard of the set is not written yet (no file, an incomplete one, or another
// set's). Reads headers only.
std::vector<int> missing_checkpoint_shards(const std::string& dir, int64_t step, int world,
                                           const std::string& set_id);

// Removes the shard files in dir whose step has no index (a set interrupted before its index was
// written); returns how many. Only while no run writes to dir (a resume does it first).
int remove_orphan_checkpoint_shards(const std::string& dir);

}  // namespace gradus::io
