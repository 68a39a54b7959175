// The DataLoader's per-batch stages around dataset->get_batch (internal to gradus_data):
//  - worker side: move the batch to a CPU target and transform it there, or, for a CUDA target,
//    copy it into page-locked memory (prepare_batch);
//  - loop side, CUDA target: the device copy one batch ahead on the copy stream (DeviceFeed) and
//    the transform on the compute stream (transform_batch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include "gradus/core/cuda.h"
#include "gradus/data/dataloader.h"

namespace gradus::data::detail {

// Page-locked host buffers, reused across batches and epochs. A tensor from pinned_copy() gives
// its buffer back when its last reference goes away; the pool lives until the last such tensor.
class PinnedPool : public std::enable_shared_from_this<PinnedPool> {
 public:
  PinnedPool() = default;
  ~PinnedPool();
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A contiguous pinned copy of t (a CPU tensor); t itself when memory cannot be pinned (then
  // one warning line on stderr, once per pool, and pageable memory from there on).
  Tensor pinned_copy(const Tensor& t);
  bool pinning_failed() const;

 private:
  void* acquire(size_t nbytes);  // nullptr when pinning is impossible
  void release(void* p, size_t nbytes);

  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;
  bool failed_ = false;
};

// A loader worker computes on one OpenMP thread (n workers take n cores).
void configure_worker_thread();
// Where the transform of a batch draws from (transform_stream with this rank's first example).
PhiloxState batch_stream(const DataLoaderOptions& o, int64_t epoch, int64_t batch);
// Worker side: the loaded batch ready for the loop (see the file comment).
Example prepare_batch(Example batch, const DataLoaderOptions& o, PinnedPool* pinned,
                      const PhiloxState& stream);
// options.transform on a batch already on its device, drawing from `stream`.
void transform_batch(Example& batch, const DataLoaderOptions& o, const PhiloxState& stream);

// Loop side of a CUDA target, one per epoch run, used by the loop's thread only.
class DeviceFeed {
 public:
  explicit DeviceFeed(Device device) : device_(device) {}
  ~DeviceFeed();  // waits for copies still reading host buffers
  DeviceFeed(const DeviceFeed&) = delete;
  DeviceFeed& operator=(const DeviceFeed&) = delete;

  bool staged(int64_t batch) const;
  // Starts copying host batch `batch` to the device on the copy stream; returns at once.
  void stage(int64_t batch, Example host);
  // The device batch (staged before); the compute stream waits for its copy on the device.
  Example take(int64_t batch);

 private:
  struct Copy {
    int64_t batch = 0;
    Example host;    // kept until the copy has read it
    Example device;  // written by the copy stream
    std::unique_ptr<cuda::Event> done;
  };
  void reclaim();  // drops the host side of completed copies (their buffers go back to the pool)

  Device device_;
  std::deque<Copy> staged_;     // copies started, batch not yet taken
  std::deque<Copy> in_flight_;  // taken; the copy may still be running
};

}  // namespace gradus::data::detail
