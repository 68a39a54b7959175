// DataLoader: seeded epoch orders, and an EpochRun that loads batches either in the calling
// thread or in worker threads feeding a bounded, in-order queue.
#include "gradus/data/dataloader.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "data/loader_stages.h"
#include "gradus/autograd.h"
#include "gradus/core/error.h"
#include "gradus/core/profiling.h"

namespace gradus::data {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform integer in [0, bound) by rejection (std::uniform_int_distribution's algorithm is not
// specified by the standard, so orders would differ between standard libraries).
uint64_t bounded(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;  // largest multiple of bound
  uint64_t x;
  do {
    x = rng();
  } while (x >= limit);
  return x % bound;
}

}  // namespace

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  std::mt19937_64 rng(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)));
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[bounded(rng, i)]);
  }
  return order;
}

PhiloxState transform_stream(uint64_t seed, int64_t epoch, int64_t batch, int64_t first_example) {
  // A key of its own (not the shuffle's) per epoch; 2^32 blocks per batch.
  const uint64_t key =
      splitmix64(splitmix64(seed ^ 0x617567'6d656e74ull) ^ static_cast<uint64_t>(epoch));
  return {key, (static_cast<uint64_t>(batch) << 32) + static_cast<uint64_t>(first_example)};
}

// ------------------------------------------------------------------------------ EpochRun
class DataLoader::EpochRun {
 public:
  EpochRun(DataLoader* loader, int64_t start_batch)
      : loader_(loader),
        order_(loader->epoch_order(loader->position_.epoch)),
        end_(loader->size()),
        epoch_(loader->position_.epoch),
        started_(Clock::now()),
        next_claim_(start_batch),
        next_consume_(start_batch) {
    loader_->running_ = true;
    if (loader->options_.device.is_cuda()) {
      feed_ = std::make_unique<detail::DeviceFeed>(loader->options_.device);
    }
    const int workers = loader->options_.num_workers;
    depth_ = std::max<int64_t>(loader->options_.prefetch, workers);
    // The destructor does not run when the constructor throws (thread creation failed, or the
    // first batch could not be loaded): stop the workers here so none is left joinable.
    try {
      // No more threads than batches left (counted before any worker touches next_claim_).
      const int64_t threads = std::min<int64_t>(workers, end_ - start_batch);
      for (int64_t w = 0; w < threads; ++w) {
        threads_.emplace_back([this, w] {
          profiling::set_thread_name("dataloader worker " + std::to_string(w));
          worker();
        });
      }
      advance();
    } catch (...) {
      stop();
      loader_->running_ = false;
      throw;
    }
  }

  ~EpochRun() {
    stop();
    feed_.reset();  // waits for copies still reading pinned buffers
    if (!done_) loader_->stats_.elapsed_seconds += seconds_since(started_);
    loader_->running_ = false;
  }

  bool done() const { return done_; }
  Example& current() { return current_; }

  // Fetches the next batch into current_, or marks the run done at the end of the epoch.
  void advance() {
    if (next_consume_ >= end_) {
      done_ = true;
      current_ = {};
      loader_->position_ = {loader_->position_.epoch + 1, 0};
      loader_->stats_.elapsed_seconds += seconds_since(started_);
      return;
    }
    const auto waiting = Clock::now();
    // The loop's view: with workers, how long it waited for a batch; without, the whole load.
    GRADUS_PROFILE_SCOPE(data, "dataloader.next");
    const int64_t b = next_consume_;
    if (feed_) {
      advance_on_device(b);
    } else {
      current_ = take_loaded(b);
      consumed();
    }
    // The batch being used is b; a checkpoint taken now resumes after it.
    loader_->position_.batch = b + 1;
    LoaderStats& stats = loader_->stats_;
    stats.wait_seconds += seconds_since(waiting);
    stats.batches += 1;
    if (current_.input.defined() && current_.input.dim() > 0)
      stats.samples += current_.input.size(0);
  }

 private:
  struct Slot {
    Example batch;
    std::exception_ptr error;
  };

  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }

  // CUDA target: batch b's copy was started one batch ahead (or starts now); the compute stream
  // waits for it, and batch b + 1's copy starts at once when its host batch is ready, so that it
  // overlaps this step's compute.
  void advance_on_device(int64_t b) {
    if (!feed_->staged(b)) feed_->stage(b, take_loaded(b));
    consumed();
    current_ = feed_->take(b);
    detail::transform_batch(current_, loader_->options_,
                            detail::batch_stream(loader_->options_, epoch_, b));
    if (b + 1 < end_ && !feed_->staged(b + 1)) {
      std::optional<Example> next = try_take_loaded(b + 1);
      if (next) feed_->stage(b + 1, std::move(*next));
    }
  }

  // The batch at next_consume_ has been taken: the workers may load one more ahead.
  void consumed() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++next_consume_;
    }
    space_cv_.notify_all();
  }

  // Host batch b: loaded here (no workers) or taken from the queue, waiting for it (the caller
  // then calls consumed()).
  Example take_loaded(int64_t b) {
    if (threads_.empty()) return load(b);
    Slot slot;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_cv_.wait(lock, [&] { return ready_.count(b) != 0; });
      auto it = ready_.find(b);
      slot = std::move(it->second);
      ready_.erase(it);
    }
    if (slot.error) std::rethrow_exception(slot.error);
    return std::move(slot.batch);
  }

  // Host batch b when a worker has it ready (a failed load stays queued, to be rethrown when the
  // loop reaches b).
  std::optional<Example> try_take_loaded(int64_t b) {
    if (threads_.empty()) return std::nullopt;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ready_.find(b);
    if (it == ready_.end() || it->second.error) return std::nullopt;
    Example batch = std::move(it->second.batch);
    ready_.erase(it);
    return batch;
  }

  Example load(int64_t b) const {
    GRADUS_PROFILE_SCOPE(data, "dataloader.load");
    const DataLoaderOptions& o = loader_->options_;
    const int64_t n = static_cast<int64_t>(order_.size());
    const auto [first, last] = loader_->batch_range(b, n);
    std::vector<int64_t> indices(order_.begin() + first, order_.begin() + last);
    return detail::prepare_batch(loader_->dataset_->get_batch(indices), o, loader_->pinned_.get(),
                                 detail::batch_stream(o, epoch_, b));
  }

  void worker() {
    NoGradGuard no_grad;  // loading never records a graph
    detail::configure_worker_thread();
    for (;;) {
      int64_t b;
      {
        std::unique_lock<std::mutex> lock(mu_);
        space_cv_.wait(lock, [&] {
          return stop_ || next_claim_ >= end_ || next_claim_ < next_consume_ + depth_;
        });
        if (stop_ || next_claim_ >= end_) return;
        b = next_claim_++;
      }
      // Every claimed batch is delivered (a value or an error), so the consumer never waits
      // for a batch no one will produce.
      Slot slot;
      try {
        slot.batch = load(b);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.emplace(b, std::move(slot));
      }
      ready_cv_.notify_all();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    space_cv_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
  }

  DataLoader* loader_;
  const std::vector<int64_t> order_;
  const int64_t end_;  // batches in the epoch
  const int64_t epoch_;
  const Clock::time_point started_;
  std::unique_ptr<detail::DeviceFeed> feed_;  // CUDA target
  int64_t depth_ = 1;
  Example current_;
  bool done_ = false;

  std::mutex mu_;
  std::condition_variable space_cv_;  // workers wait for room in the queue
  std::condition_variable ready_cv_;  // the consumer waits for its next batch
  std::map<int64_t, Slot> ready_;     // loaded batches by index (workers may finish out of order)
  int64_t next_claim_;                // next batch a worker will load
  int64_t next_consume_;              // next batch the loop will take
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// ------------------------------------------------------------------------------ Iterator
DataLoader::Iterator::Iterator(std::unique_ptr<EpochRun> run) : run_(std::move(run)) {}
DataLoader::Iterator::Iterator(Iterator&&) noexcept = default;
DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&&) noexcept = default;
DataLoader::Iterator::~Iterator() = default;

Example& DataLoader::Iterator::operator*() const {
  GRADUS_CHECK(run_ && !run_->done(), ValueError,
               "DataLoader: dereferencing an iterator past the end of the epoch");
  return run_->current();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  GRADUS_CHECK(run_ && !run_->done(), ValueError,
               "DataLoader: incrementing an iterator past the end of the epoch");
  run_->advance();
  return *this;
}

bool DataLoader::Iterator::operator==(Sentinel) const {
  return !run_ || run_->done();
}

// ------------------------------------------------------------------------------ DataLoader
DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  GRADUS_CHECK(dataset_ != nullptr, ValueError, "DataLoader: the dataset is null");
  GRADUS_CHECK(options_.batch_size >= 1, ValueError, "DataLoader: batch_size must be >= 1, got ",
               options_.batch_size);
  GRADUS_CHECK(options_.prefetch >= 1, ValueError, "DataLoader: prefetch must be >= 1, got ",
               options_.prefetch);
  GRADUS_CHECK(options_.num_workers >= 0, ValueError, "DataLoader: num_workers must be >= 0, got ",
               options_.num_workers);
  GRADUS_CHECK(
      options_.world_size >= 1 && options_.rank >= 0 && options_.rank < options_.world_size,
      ValueError, "DataLoader: rank ", options_.rank, " is not in a world of ",
      options_.world_size);
  GRADUS_CHECK(options_.batch_size % options_.world_size == 0, ValueError,
               "DataLoader: the global batch_size ", options_.batch_size,
               " is not divisible by the world size ", options_.world_size,
               " (each rank takes an equal share)");
  if (options_.device.is_cuda() && options_.pin_memory) {
    pinned_ = std::make_shared<detail::PinnedPool>();
  }
}

std::pair<int64_t, int64_t> DataLoader::batch_range(int64_t batch, int64_t n) const {
  const int64_t first = batch * options_.batch_size;
  if (options_.world_size == 1) return {first, std::min(first + options_.batch_size, n)};
  const int64_t share = options_.batch_size / options_.world_size;
  return {first + options_.rank * share, first + (options_.rank + 1) * share};
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::size() const {
  const int64_t n = dataset_->size();
  const int64_t b = options_.batch_size;
  return options_.drop_last || options_.world_size > 1 ? n / b : (n + b - 1) / b;
}

void DataLoader::set_position(LoaderPosition p) {
  GRADUS_CHECK(!running_, ValueError,
               "DataLoader::set_position: a loop over this loader is still running");
  GRADUS_CHECK(p.epoch >= 0 && p.batch >= 0 && p.batch <= size(), ValueError,
               "DataLoader::set_position: position (epoch ", p.epoch, ", batch ", p.batch,
               ") is invalid: the epoch must be >= 0 and the batch in [0, ", size(), "]");
  position_ = p;
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  const int64_t n = dataset_->size();
  if (options_.shuffle) return shuffled_indices(n, options_.seed, epoch);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  return order;
}

std::vector<int64_t> DataLoader::batch_indices(int64_t epoch, int64_t batch) const {
  GRADUS_CHECK(batch >= 0 && batch < size(), IndexError, "DataLoader::batch_indices: batch ", batch,
               " is out of range for an epoch of ", size(), " batches");
  const std::vector<int64_t> order = epoch_order(epoch);
  const auto [first, last] = batch_range(batch, dataset_->size());
  return {order.begin() + first, order.begin() + last};
}

DataLoader::Iterator DataLoader::begin() {
  GRADUS_CHECK(!running_, ValueError,
               "DataLoader::begin: another loop over this loader is still running (finish or "
               "destroy its iterator first)");
  return Iterator(std::make_unique<EpochRun>(this, position_.batch));
}

}  // namespace gradus::data
