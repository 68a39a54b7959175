// DataLoader: iterates over a Dataset in batches, one epoch per range-for loop.
//
//   data::DataLoader loader(dataset, {.batch_size = 128, .shuffle = true, .seed = 1});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (data::Example& batch : loader) { ... batch.input, batch.target ... }
//
// Shuffling: the order of epoch e is a pure function of (seed, e): a Fisher-Yates shuffle of
// 0..N-1 driven by std::mt19937_64 seeded with splitmix64(seed, e) (the standard fixes
// mt19937_64's output, and the bounded draws are gradus's own, so the order is the same with
// every compiler and standard library). It does not touch gradus's global generator.
//
// Position: the loader is a cursor (epoch, batch) pointing at the next batch it will yield.
// Each yielded batch advances it; finishing an epoch moves it to (epoch + 1, 0), so consecutive
// loops see consecutive epochs. A loop left early leaves the cursor at the first batch not yet
// yielded, and the next loop continues from there. For checkpoints, save position() after a
// training step and restore it with set_position(): the remaining batches are the same ones.
//
// Workers: with num_workers >= 1, background threads load batches (dataset->get_batch, then the
// transform for a CPU target) into a bounded queue while the caller trains; batches are yielded in
// order. At most max(prefetch, num_workers) batches are loaded ahead of the one being used. An
// exception thrown while loading a batch is rethrown in the loop when that batch is reached.
// Leaving the loop early (break, exception) stops and joins the workers. Workers run their kernels
// (a transform's) on one OpenMP thread each, like PyTorch's loader workers, so that n workers
// take n cores and leave the rest to training.
//
// Transform: options.transform runs on each batch once it is on `device` (data augmentation; see
// gradus/data/augment.h). Its generator starts at transform_stream(seed, epoch, batch, first),
// a pure function of the batch, so batches are identical whatever the number of workers.
//
// CUDA target: workers assemble each batch in page-locked (pinned) host memory; the loop's thread
// copies batch b + 1 to the device on the copy stream while the model computes on batch b, and
// the compute stream waits for that copy with an event, on the device (the host never blocks on a
// copy). The transform's kernels then run on the compute stream. When memory cannot be pinned,
// batches stay in pageable memory after a one-line warning.
//
// Statistics (stats()): how long the loop waited for data, batches, samples and samples/s.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "gradus/core/device.h"
#include "gradus/core/random.h"
#include "gradus/data/dataset.h"

namespace gradus::data {

// A transform of a whole batch in place, drawing its randomness from `gen` only.
using BatchTransform = std::function<void(Example& batch, Generator& gen)>;

namespace detail {
class PinnedPool;  // page-locked batch buffers (src/data/device_feed.h)
}

struct DataLoaderOptions {
  int64_t batch_size = 32;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;         // drop the final batch when it has fewer than batch_size examples
  int64_t prefetch = 2;           // queue depth (batches loaded ahead), >= 1
  Device device = Device::cpu();  // batches are moved here
  int num_workers = 1;            // loading threads; 0 = load in the calling thread
  // Data-parallel sharding: with world_size > 1, batch_size is the global batch (divisible by
  // world_size) and this loader yields rank `rank`'s contiguous share of each global batch of the
  // same seeded order, so the ranks see disjoint samples and, together, exactly what one
  // process with the whole batch sees. Every rank runs the same number of steps: the final global
  // batch is dropped when it is incomplete (drop_last, whatever the option says).
  int rank = 0;
  int world_size = 1;
  BatchTransform transform = {};  // empty: none
  bool pin_memory = true;         // CUDA target: assemble batches in page-locked host memory
};

// Totals since construction or reset_stats().
struct LoaderStats {
  int64_t batches = 0;  // yielded to the loop
  int64_t samples = 0;
  // Time the loop spent blocked getting its next batch (with 0 workers: loading it itself).
  double wait_seconds = 0;
  // Wall time of the loops, from begin() to the end of the epoch (or to leaving the loop).
  double elapsed_seconds = 0;
  double samples_per_second() const {
    return elapsed_seconds > 0 ? static_cast<double>(samples) / elapsed_seconds : 0.0;
  }
};

struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;  // index within the epoch of the next batch to yield
  friend bool operator==(const LoaderPosition&, const LoaderPosition&) = default;
};

// The sample order of one epoch (pure function of its arguments): 0..n-1 shuffled.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, int64_t epoch);

// Where the transform of batch `batch` of epoch `epoch` starts drawing: key from (seed, epoch),
// counter batch * 2^32 + first_example (this rank's first example within the global batch). A
// transform drawing one Philox block per example (augment_images) thereby gives each example of
// the global batch its own parameters, the same at any number of workers or ranks.
PhiloxState transform_stream(uint64_t seed, int64_t epoch, int64_t batch, int64_t first_example);

class DataLoader {
 public:
  class EpochRun;  // one pass over an epoch (internal)
  struct Sentinel {};
  class Iterator {
   public:
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    explicit Iterator(std::unique_ptr<EpochRun> run);
    Iterator(Iterator&&) noexcept;
    Iterator& operator=(Iterator&&) noexcept;
    ~Iterator();  // stops and joins the workers of an unfinished epoch

    Example& operator*() const;
    Example* operator->() const { return &**this; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    bool operator==(Sentinel) const;

   private:
    std::unique_ptr<EpochRun> run_;
  };

  // Throws ValueError on a null dataset, batch_size < 1, prefetch < 1 or num_workers < 0.
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  // Iterators point into the loader: it can be neither copied nor moved.
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts (or continues) the epoch at position(). Only one loop may run at a time: calling
  // begin() while another iterator of this loader is alive throws ValueError.
  Iterator begin();
  Sentinel end() const { return {}; }

  int64_t size() const;  // batches per epoch
  const Dataset& dataset() const { return *dataset_; }
  const DataLoaderOptions& options() const { return options_; }

  // The next loop runs epoch `epoch` from its first batch.
  void set_epoch(int64_t epoch) { set_position({epoch, 0}); }
  // The next loop runs epoch p.epoch starting at batch p.batch (0 <= p.batch <= size()).
  void set_position(LoaderPosition p);
  LoaderPosition position() const { return position_; }
  int64_t epoch() const { return position_.epoch; }
  // Dataset indices of batch `batch` of epoch `epoch` (what that batch will hold).
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t batch) const;

  LoaderStats stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  friend class EpochRun;
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // [first, last) of batch `batch` (this rank's share) in an epoch order of n samples.
  std::pair<int64_t, int64_t> batch_range(int64_t batch, int64_t n) const;

  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  LoaderPosition position_;
  bool running_ = false;
  LoaderStats stats_;                           // updated by the loop's thread only
  std::shared_ptr<detail::PinnedPool> pinned_;  // CUDA target with pin_memory
};

}  // namespace gradus::data
