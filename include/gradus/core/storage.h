// A reference-counted device buffer. Views of a tensor share one Storage.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "gradus/core/device.h"

namespace gradus {

// Allocates raw bytes on one device type. The CPU allocator always exists; the CUDA backend
// registers its stream-ordered pool allocator when it is built.
// The streams (opaque handles, cudaStream_t on CUDA) a block was used on: the stream it was
// allocated in the order of, and every other stream recorded with record_stream().
struct StreamUses {
  void* allocated_on = nullptr;
  std::vector<void*> others;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes, int device_index) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, int device_index) = 0;
  // Stream-ordered devices: the calling thread's current stream, which an allocation made now is
  // ordered on (nullptr where memory has no stream order: the CPU).
  virtual void* allocation_stream(int /*device_index*/) { return nullptr; }
  // Frees a block once every stream in `uses` has passed its last use of it (never earlier).
  virtual void deallocate_after(void* ptr, size_t nbytes, int device_index, const StreamUses&) {
    deallocate(ptr, nbytes, device_index);
  }
};

// Replaces the allocator for a device type (tests install poisoning allocators this way).
void register_allocator(DeviceType type, Allocator* allocator);
// The built-in CPU allocator (aligned, with the block cache of gradus/core/host_memory.h).
Allocator* default_host_allocator();
Allocator* allocator_for(DeviceType type);  // throws DeviceError if the device type is not built

namespace detail {
[[noreturn]] void throw_released_storage();
}  // namespace detail

class StorageImpl {
 public:
  StorageImpl(size_t nbytes, Device device);
  // Wraps memory owned by someone else (no free on destruction).
  StorageImpl(void* external, size_t nbytes, Device device);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Frees the memory but keeps the object: its identity, size and version, and so every view of
  // it and every tensor autograd saved. Fully sharded training holds a unit's whole parameters
  // only while it computes (like FSDP2's storage resize to zero); reacquire() gives the storage
  // new memory (uninitialised) before it is written again. A released storage's tensors refuse
  // to be read (ValueError). Owned storages only.
  void release();
  void reacquire();
  bool is_resident() const { return data_ != nullptr || nbytes_ == 0; }

  // Bumped by every in-place write through any view; autograd compares it with the value seen
  // when a tensor was saved for backward.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

  // Marks the memory as used by work on `stream` (cuda::record_stream): when the storage dies, its
  // block goes back to the pool only after that stream's work queued so far has finished.
  void record_stream(void* stream);
  StreamUses stream_uses() const;

 private:
  void free_memory();
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = true;
  std::atomic<uint64_t> version_{0};
  mutable std::mutex streams_mu_;
  StreamUses streams_;
};

using Storage = std::shared_ptr<StorageImpl>;

}  // namespace gradus
