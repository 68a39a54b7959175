// Sharded checkpoint sets (io/checkpoint_set.h, train::CheckpointOptions::sharded) at every world
// size the dist suite runs (1-4 ranks): under zero1 and fsdp, written synchronously and
// asynchronously, a set loads as exactly (bitwise) what the consolidated checkpoint of the same
// step holds, and --keep prunes whole sets; a flipped bit in a shard, a missing shard or a shard of
// another set makes the whole set unusable and the newest-good fallback goes past it; shards whose
// set never got its index are removed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "dist/dist_test_util.h"
#include "dist/gpt_test_util.h"
#include "gradus/io/checkpoint_set.h"
#include "gradus/train/checkpoints.h"
#include "gradus/train/strategy.h"

namespace gradus::testing {
namespace {

namespace fs = std::filesystem;

// Flips one bit of byte `at` (counted from the end when negative).
void flip_bit(const std::string& path, int64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  const int64_t pos = at < 0 ? size + at : at;
  char c = 0;
  f.seekg(pos);
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(pos);
  f.write(&c, 1);
}

int count_files(const std::string& dir, const std::string& part) {
  int n = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    n += e.path().filename().string().find(part) != std::string::npos ? 1 : 0;
  }
  return n;
}

void expect_same_state(const io::TrainingState& set, const io::TrainingState& single) {
  ASSERT_EQ(set.model.keys(), single.model.keys());  // the same names, in the same order
  for (const auto& [name, t] : single.model) {
    EXPECT_TRUE(all_close(set.model.at(name), t, 0, 0)) << name;  // bitwise
  }
  ASSERT_EQ(set.optimizer.tensors.size(), single.optimizer.tensors.size());
  for (const auto& [key, t] : single.optimizer.tensors) {
    ASSERT_TRUE(set.optimizer.tensors.count(key)) << key;
    EXPECT_TRUE(all_close(set.optimizer.tensors.at(key), t, 0, 0)) << key;
  }
  EXPECT_EQ(set.optimizer.type, single.optimizer.type);
  EXPECT_EQ(set.optimizer.scalars, single.optimizer.scalars);
  EXPECT_EQ(set.step, single.step);
  EXPECT_EQ(set.batch_index, single.batch_index);
  EXPECT_EQ(set.rng.seed, single.rng.seed);
  EXPECT_EQ(set.rng.offset, single.rng.offset);
  EXPECT_EQ(set.extra, single.extra);
}

class CheckpointSets : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(CheckpointSets, HoldWhatTheConsolidatedCheckpointHolds) {
  const auto& [mode, async] = GetParam();
  const uint64_t seed = shared_seed();
  const int size = dist::world_size(), rank = dist::rank();
  auto model = build_gpt(seed);
  auto strategy = train::make_strategy(mode);
  strategy->setup(model, [](std::vector<Tensor> p) { return gpt_optimizer("adamw", p); });
  amp::GradScaler no_scaling({.enabled = false});
  const std::string base =
      (fs::temp_directory_path() /
       ("gradus_sets_" + mode + (async ? "_async_" : "_") + std::to_string(seed)))
          .string();
  const std::string sets_dir = base + "/sets", single_dir = base + "/single";
  auto whole = [&strategy] { return strategy->full_parameters(); };
  train::Checkpointer sets({.dir = sets_dir, .keep = 2, .async = async, .sharded = true}, *model,
                           strategy->optimizer(), nullptr, no_scaling, "{}", rank == 0);
  train::Checkpointer single({.dir = single_dir, .full_parameters = whole}, *model,
                             strategy->optimizer(), nullptr, no_scaling, "{}", rank == 0);
  const int64_t rows = 2;
  for (int64_t step = 1; step <= 3; ++step) {
    strategy_step(*strategy, token_batch(rows * size, seed, step), rank, rows);
    const train::EpochProgress progress{
        .loss_sum = 0.5 * static_cast<double>(step), .samples = step, .last_lr = 1e-2};
    sets.save(step, {0, step}, progress);
    single.save(step, {0, step}, progress);
  }
  // A second checkpoint of the last step at another loader position (a run's final checkpoint
  // after its last step's) replaces the set: its shards share the first one's names.
  sets.save(3, {1, 0}, {});
  single.save(3, {1, 0}, {});
  sets.finish();
  single.finish();
  dist::default_group()->barrier()->wait();

  // --keep 2: the sets of steps 2 and 3, each an index and one shard per rank.
  EXPECT_EQ(io::list_checkpoints(sets_dir).size(), 2u);
  EXPECT_EQ(count_files(sets_dir, ".shard-"), 2 * size);
  EXPECT_EQ(count_files(sets_dir, io::checkpoint_shard_filename(1, 0, size).substr(0, 16)), 0);
  const std::string index3 = sets_dir + "/" + io::checkpoint_filename(3);
  const std::string index2 = sets_dir + "/" + io::checkpoint_filename(2);
  const io::TrainingState from_set = io::load_checkpoint(index3);
  EXPECT_EQ(from_set.epoch, 1);
  expect_same_state(from_set, io::load_checkpoint(single_dir + "/" + io::checkpoint_filename(3)));
  ASSERT_TRUE(io::verify_checkpoint(index3).empty());
  ASSERT_EQ(from_set.optimizer.tensors.size(), 2 * model->parameters().size());
  dist::default_group()->barrier()->wait();

  if (!async) {
    // A diverged weight in one rank's slice: that rank refuses to write it (naming it), every other
    // rank learns that the set was not written, and no index appears.
    {
      const train::FullParameters held = strategy->full_parameters();
      NoGradGuard no_grad;
      model->parameters()[0].detach().fill_(std::nan(""));
    }
    try {
      sets.save(4, {0, 4}, {});
      ADD_FAILURE() << "a set with a non-finite weight was written";
    } catch (const Error& e) {
      EXPECT_TRUE(std::string(e.what()).find("non-finite") != std::string::npos ||
                  std::string(e.what()).find("could not write its shard") != std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(fs::exists(sets_dir + "/" + io::checkpoint_filename(4)));
    dist::default_group()->barrier()->wait();
    // The shards the other ranks wrote are orphans, removed as a resume removes them.
    if (rank == 0) {
      EXPECT_LT(io::remove_orphan_checkpoint_shards(sets_dir), size);
    }
    dist::default_group()->barrier()->wait();
  }

  if (rank == 0) {
    // A flipped bit in the last shard's data: the set is damaged as a whole, and the fallback
    // goes to the set before it.
    const std::string last = sets_dir + "/" + io::checkpoint_shard_filename(3, size - 1, size);
    flip_bit(last, -3);
    try {
      io::load_checkpoint(index3);
      ADD_FAILURE() << "a damaged shard loaded";
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find(io::checkpoint_shard_filename(3, size - 1, size)),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("CRC-32 does not match"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(io::verify_checkpoint(index3).empty());
    std::optional<io::GoodCheckpoint> good = io::latest_good_checkpoint(sets_dir);
    ASSERT_TRUE(good.has_value());
    EXPECT_EQ(good->path, index2);
    EXPECT_EQ(good->state.step, 2);
    ASSERT_EQ(good->skipped.size(), 1u);
    EXPECT_EQ(good->skipped[0].first, index3);

    // A shard of another set under this set's name (the previous set's, renamed): refused by id.
    const std::string first2 = sets_dir + "/" + io::checkpoint_shard_filename(2, 0, size);
    fs::copy_file(first2, base + "/saved_shard");
    fs::remove(first2);
    io::TrainingState scratch;
    EXPECT_THROW(io::load_checkpoint(index2), IOError);  // missing
    EXPECT_THROW(io::latest_good_checkpoint(sets_dir), io::UnusableCheckpointsError);
    io::save_checkpoint_shard(sets_dir, 2, 0, size, "0123456789abcdef", {});
    try {
      io::load_checkpoint(index2);
      ADD_FAILURE() << "another set's shard loaded";
    } catch (const IOError& e) {
      EXPECT_NE(std::string(e.what()).find("belongs to another set"), std::string::npos)
          << e.what();
    }
    fs::remove(first2);
    fs::copy_file(base + "/saved_shard", first2);
    EXPECT_EQ(io::load_checkpoint(index2).step, 2);

    // Shards without an index (a set interrupted before its index): removed, the others kept.
    for (int r = 0; r < size; ++r) io::save_checkpoint_shard(sets_dir, 7, r, size, "feed", {});
    EXPECT_EQ(io::remove_orphan_checkpoint_shards(sets_dir), size);
    EXPECT_EQ(count_files(sets_dir, ".shard-"), 2 * size);
    fs::remove_all(base);
  }
  dist::default_group()->barrier()->wait();
}

INSTANTIATE_TEST_SUITE_P(Gpt, CheckpointSets,
                         ::testing::Combine(::testing::Values("zero1", "fsdp"), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_async" : "_sync");
                         });

}  // namespace
}  // namespace gradus::testing
