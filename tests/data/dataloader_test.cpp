// DataLoader: batch counts, seeded shuffling per (seed, epoch), every index once per epoch,
// workers (order, early exit, exceptions), and resuming at a given batch.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <set>
#include <thread>

#include "support/test_util.h"

namespace gradus::data {
namespace {

// Example i: input row [i, i + 0.5, -i] (f32), target i (i64): a batch tells which indices it
// holds.
std::shared_ptr<TensorDataset> index_dataset(int64_t n) {
  Tensor x = empty({n, 3}, {DType::f32, Device::cpu(), false});
  Tensor y = empty({n}, {DType::i64, Device::cpu(), false});
  for (int64_t i = 0; i < n; ++i) {
    x.data_ptr<float>()[3 * i] = static_cast<float>(i);
    x.data_ptr<float>()[3 * i + 1] = static_cast<float>(i) + 0.5f;
    x.data_ptr<float>()[3 * i + 2] = -static_cast<float>(i);
    y.data_ptr<int64_t>()[i] = i;
  }
  return std::make_shared<TensorDataset>(x, y);
}

// The targets of every batch of one loop, checking that inputs match targets row by row.
std::vector<std::vector<int64_t>> run_epoch(DataLoader& loader) {
  std::vector<std::vector<int64_t>> batches;
  for (Example& b : loader) {
    EXPECT_EQ(b.input.size(0), b.target.size(0));
    std::vector<int64_t> ids(static_cast<size_t>(b.target.size(0)));
    for (size_t r = 0; r < ids.size(); ++r) {
      ids[r] = b.target.data_ptr<int64_t>()[r];
      const float* row = b.input.data_ptr<float>() + 3 * r;
      EXPECT_EQ(row[0], static_cast<float>(ids[r]));
      EXPECT_EQ(row[1], static_cast<float>(ids[r]) + 0.5f);
      EXPECT_EQ(row[2], -static_cast<float>(ids[r]));
    }
    batches.push_back(ids);
  }
  return batches;
}

std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

// Fails the test (and exits, since a hung thread cannot be recovered) if fn takes over 20 s.
template <typename Fn>
void within_deadline(Fn fn) {
  auto done = std::async(std::launch::async, fn);
  if (done.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    std::fprintf(stderr, "DataLoader test hung (deadline 20 s)\n");
    std::_Exit(1);
  }
  done.get();
}

class LoaderWorkers : public ::testing::TestWithParam<int> {};

TEST_P(LoaderWorkers, BatchCountsAndDropLast) {
  std::mt19937_64 rng(testing::fresh_seed());
  const int64_t n = 1 + static_cast<int64_t>(rng() % 50), bs = 1 + static_cast<int64_t>(rng() % 8);
  SCOPED_TRACE(::testing::Message() << "n=" << n << " batch=" << bs);
  for (bool drop_last : {false, true}) {
    DataLoader loader(index_dataset(n),
                      {.batch_size = bs, .drop_last = drop_last, .num_workers = GetParam()});
    const int64_t expected = drop_last ? n / bs : (n + bs - 1) / bs;
    EXPECT_EQ(loader.size(), expected);
    const auto batches = run_epoch(loader);
    ASSERT_EQ(static_cast<int64_t>(batches.size()), expected);
    for (size_t b = 0; b < batches.size(); ++b) {
      const bool last = b + 1 == batches.size();
      const int64_t want = (!drop_last && last && n % bs != 0) ? n % bs : bs;
      EXPECT_EQ(static_cast<int64_t>(batches[b].size()), want) << "batch " << b;
    }
    // Without shuffling the order is 0, 1, 2, ...
    const auto all = flatten(batches);
    for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i], static_cast<int64_t>(i));
  }
}

TEST_P(LoaderWorkers, ShuffleIsAPermutationFixedBySeedAndEpoch) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t n = 103;
  DataLoaderOptions o{.batch_size = 10, .shuffle = true, .seed = seed, .num_workers = GetParam()};
  DataLoader a(index_dataset(n), o), b(index_dataset(n), o);

  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    EXPECT_EQ(a.epoch(), epoch);  // consecutive loops run consecutive epochs
    const auto order = flatten(run_epoch(a));
    ASSERT_EQ(static_cast<int64_t>(order.size()), n);
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), static_cast<size_t>(n))
        << "an index repeated within epoch " << epoch;
    EXPECT_EQ(order, shuffled_indices(n, seed, epoch));
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);
  EXPECT_NE(orders[1], orders[2]);

  // A second loader (another worker count, same seed) jumping to epoch 2 sees the same order.
  b.set_epoch(2);
  EXPECT_EQ(flatten(run_epoch(b)), orders[2]);
  b.set_epoch(0);
  EXPECT_EQ(flatten(run_epoch(b)), orders[0]);
  // Another seed gives another order.
  o.seed = seed + 1;
  DataLoader c(index_dataset(n), o);
  EXPECT_NE(flatten(run_epoch(c)), orders[0]);
}

TEST_P(LoaderWorkers, ResumeAtBatchGivesTheRemainingBatches) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  DataLoaderOptions o{.batch_size = 7, .shuffle = true, .seed = seed, .num_workers = GetParam()};
  DataLoader full(index_dataset(60), o);
  full.set_epoch(3);
  const auto reference = run_epoch(full);
  EXPECT_EQ(full.position(), (LoaderPosition{4, 0}));
  ASSERT_EQ(reference.size(), 9u);
  const int64_t k = 1 + static_cast<int64_t>(seed % 8);  // stop after batch k - 1, in [0, 7]

  // A run interrupted after batch k - 1 saves its position ...
  DataLoader first(index_dataset(60), o);
  first.set_epoch(3);
  LoaderPosition saved;
  int64_t seen = 0;
  for (Example& b : first) {
    (void)b;
    ++seen;
    EXPECT_EQ(first.position(), (LoaderPosition{3, seen}));  // next batch to yield
    if (seen == k) {
      saved = first.position();
      break;
    }
  }
  // ... and a fresh loader restored to it yields exactly the rest.
  DataLoader resumed(index_dataset(60), o);
  resumed.set_position(saved);
  const auto rest = run_epoch(resumed);
  ASSERT_EQ(rest.size(), reference.size() - static_cast<size_t>(k));
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], reference[k + i]) << "batch " << i;
  // The loop that broke early also continues where it stopped.
  EXPECT_EQ(run_epoch(first), rest);
  EXPECT_EQ(resumed.epoch(), 4);
}

TEST_P(LoaderWorkers, EarlyBreakAndDestructionDoNotHang) {
  // A slow dataset with a deep queue: workers are busy or blocked when the loop stops.
  struct Slow : Dataset {
    std::shared_ptr<TensorDataset> inner = index_dataset(400);
    int64_t size() const override { return inner->size(); }
    Example get(int64_t i) const override { return inner->get(i); }
    Example get_batch(const std::vector<int64_t>& idx) const override {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return inner->get_batch(idx);
    }
  };
  within_deadline([&] {
    DataLoader loader(std::make_shared<Slow>(),
                      {.batch_size = 4, .prefetch = 16, .num_workers = GetParam()});
    for (int trial = 0; trial < 5; ++trial) {
      int count = 0;
      for (Example& b : loader) {
        (void)b;
        if (++count == 2) break;
      }
      EXPECT_EQ(count, 2);
    }
    EXPECT_EQ(loader.position(), (LoaderPosition{0, 10}));
    auto it = loader.begin();  // destroyed mid-epoch, workers still loading
    EXPECT_EQ((*it).target.data_ptr<int64_t>()[0], 40);
  });
}

TEST_P(LoaderWorkers, WorkerExceptionIsRethrownInTheLoop) {
  struct Faulty : Dataset {
    std::shared_ptr<TensorDataset> inner = index_dataset(50);
    int64_t size() const override { return inner->size(); }
    Example get(int64_t i) const override { return inner->get(i); }
    Example get_batch(const std::vector<int64_t>& idx) const override {
      for (int64_t i : idx) {
        if (i == 23) throw IOError("faulty dataset: example 23 is unreadable");
      }
      return inner->get_batch(idx);
    }
  };
  within_deadline([&] {
    DataLoader loader(std::make_shared<Faulty>(), {.batch_size = 5, .num_workers = GetParam()});
    int batches = 0;
    try {
      for (Example& b : loader) {
        (void)b;
        ++batches;
      }
      ADD_FAILURE() << "the worker's exception was swallowed";
    } catch (const IOError& e) {
      EXPECT_STREQ(e.what(), "faulty dataset: example 23 is unreadable");
    }
    EXPECT_EQ(batches, 4);  // batches 0-3 were fine; batch 4 holds example 23
    EXPECT_EQ(loader.position(), (LoaderPosition{0, 4}));
    // The loader is usable again (and fails again at the same batch).
    EXPECT_THROW(run_epoch(loader), IOError);
  });
}

INSTANTIATE_TEST_SUITE_P(Workers, LoaderWorkers, ::testing::Values(0, 1, 3));

TEST(DataLoader, OneLoopAtATimeAndOptionChecks) {
  DataLoader loader(index_dataset(10), {.batch_size = 3});
  {
    auto it = loader.begin();
    EXPECT_THROW(loader.begin(), ValueError);
    EXPECT_THROW(loader.set_epoch(2), ValueError);
  }
  EXPECT_NO_THROW(loader.set_position({2, 4}));  // 4 == size(): an epoch with nothing left
  EXPECT_EQ(run_epoch(loader).size(), 0u);
  EXPECT_EQ(loader.position(), (LoaderPosition{3, 0}));
  EXPECT_THROW(loader.set_position({0, 5}), ValueError);
  EXPECT_THROW(loader.set_position({-1, 0}), ValueError);
  EXPECT_THROW(DataLoader(index_dataset(4), {.batch_size = 0}), ValueError);
  EXPECT_THROW(DataLoader(index_dataset(4), {.prefetch = 0}), ValueError);
  EXPECT_THROW(DataLoader(index_dataset(4), {.num_workers = -1}), ValueError);
  EXPECT_THROW(DataLoader(nullptr), ValueError);
  EXPECT_EQ(loader.batch_indices(0, 3), (std::vector<int64_t>{9}));
  EXPECT_THROW(loader.batch_indices(0, 4), IndexError);
}

TEST(TensorDataset, ChecksAndGather) {
  EXPECT_THROW(TensorDataset(empty({4, 2}), empty({3}, {DType::i64})), ShapeError);
  EXPECT_THROW(TensorDataset(empty({}), empty({}, {DType::i64})), ShapeError);
  auto ds = index_dataset(6);
  EXPECT_THROW(ds->get(6), IndexError);
  EXPECT_THROW(ds->get_batch({1, -1}), IndexError);
  Example e = ds->get(4);
  EXPECT_EQ(e.input.sizes(), (Shape{3}));
  EXPECT_EQ(e.input.to_vector<double>(), (std::vector<double>{4, 4.5, -4}));
  EXPECT_EQ(e.target.item<int64_t>(), 4);
}

TEST(Dataset, DefaultGetBatchStacks) {
  // A dataset without its own get_batch: examples are stacked.
  struct PerExample : Dataset {
    int64_t size() const override { return 5; }
    Example get(int64_t i) const override {
      return {tensor({double(i), double(i * i)}, {2}), scalar_tensor(double(i), {DType::i64})};
    }
  };
  DataLoader loader(std::make_shared<PerExample>(), {.batch_size = 2, .shuffle = true, .seed = 9});
  int64_t total = 0;
  for (Example& b : loader) {
    ASSERT_EQ(b.input.dim(), 2);
    const auto x = b.input.to_vector<double>();
    const auto y = b.target.to_vector<int64_t>();
    for (size_t r = 0; r < y.size(); ++r) {
      EXPECT_EQ(x[2 * r], static_cast<double>(y[r]));
      EXPECT_EQ(x[2 * r + 1], static_cast<double>(y[r] * y[r]));
    }
    total += static_cast<int64_t>(y.size());
  }
  EXPECT_EQ(total, 5);
}

}  // namespace
}  // namespace gradus::data

namespace gradus::data {
namespace {

// Sharding: the ranks' shares of each global batch are disjoint, contiguous slices of the
// one-process batch; together they are exactly it. The incomplete final global batch is dropped
// everywhere.
TEST(DataLoaderSharding, RanksSplitEachGlobalBatchOfTheSameOrder) {
  const uint64_t seed = testing::fresh_seed();
  for (int world : {2, 3, 4}) {
    const int64_t global = 12;
    auto ds = index_dataset(100);
    DataLoader whole(ds, {.batch_size = global, .shuffle = true, .seed = seed, .num_workers = 0});
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.push_back(std::make_unique<DataLoader>(ds, DataLoaderOptions{.batch_size = global,
                                                                         .shuffle = true,
                                                                         .seed = seed,
                                                                         .num_workers = 1,
                                                                         .rank = r,
                                                                         .world_size = world}));
    }
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      whole.set_epoch(epoch);
      auto expected = run_epoch(whole);
      expected.pop_back();  // 100 = 8 * 12 + 4: the incomplete global batch is dropped
      std::vector<std::vector<std::vector<int64_t>>> got;
      for (auto& l : ranks) {
        EXPECT_EQ(l->size(), 8);
        l->set_epoch(epoch);
        got.push_back(run_epoch(*l));
      }
      for (size_t b = 0; b < expected.size(); ++b) {
        std::vector<int64_t> joined;
        for (int r = 0; r < world; ++r) {
          ASSERT_EQ(got[static_cast<size_t>(r)][b].size(), static_cast<size_t>(global / world));
          joined.insert(joined.end(), got[static_cast<size_t>(r)][b].begin(),
                        got[static_cast<size_t>(r)][b].end());
        }
        EXPECT_EQ(joined, expected[b]) << "world " << world << " batch " << b << " seed " << seed;
      }
    }
    // Resuming mid-epoch gives the same remaining shares.
    ranks[1]->set_position({1, 5});
    EXPECT_EQ(run_epoch(*ranks[1]).front(), ranks[1]->batch_indices(1, 5));
  }
  auto ds = index_dataset(10);
  EXPECT_THROW(DataLoader(ds, {.batch_size = 10, .rank = 0, .world_size = 3}), ValueError);
  EXPECT_THROW(DataLoader(ds, {.batch_size = 6, .rank = 3, .world_size = 3}), ValueError);
}

}  // namespace
}  // namespace gradus::data
