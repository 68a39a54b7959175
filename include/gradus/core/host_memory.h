// Host (CPU) memory: gradus keeps freed large blocks for reuse instead of handing them back to
// the C library at once. A training step allocates the same activation and gradient sizes every
// step; glibc serves blocks of this size with mmap/munmap (or trims its heap), so without the
// cache every step pays page faults, page zeroing and TLB shoot-downs on fresh memory.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradus::host {

struct CacheStats {
  size_t cached_bytes = 0;  // held in the cache now (freed by tensors, not returned)
  size_t limit_bytes = 0;   // the cache never holds more than this; 0 = caching off
  uint64_t hits = 0;        // allocations served from the cache
  uint64_t misses = 0;      // cacheable allocations that went to the C library
};

// Blocks of at least this many bytes are cached; smaller ones go straight to the C library,
// whose small-block free lists are already fast.
inline constexpr size_t kMinCachedBlock = size_t{64} << 10;

CacheStats cache_stats();
// Returns every cached block to the C library.
void empty_cache();
// Caps what the cache may hold (0 turns caching off and empties it). The default is
// GRADUS_HOST_CACHE_MB from the environment, else 2 GiB (0 in AddressSanitizer builds, so that
// ASan sees every free).
void set_cache_limit(size_t bytes);

// What tensors hold on the CPU (the bytes they asked for, cached blocks not counted), as
// cuda::memory_stats() reports for a GPU.
struct MemoryStats {
  size_t allocated_bytes = 0;       // held by live tensors now
  size_t peak_allocated_bytes = 0;  // the most held at once since the last reset_peak_memory()
  size_t limit_bytes = 0;           // set_memory_limit (0: none)
  uint64_t num_allocs = 0;
  uint64_t num_ooms = 0;  // allocations refused by the limit (or by the C library)
};
MemoryStats memory_stats();
void reset_peak_memory();
// Caps what tensors may hold on the CPU: an allocation that would exceed it throws
// OutOfMemoryError, as a full GPU does (gradus train --memory-limit; the batch-size finder uses
// it). 0 removes the limit. Takes effect for the next allocation.
void set_memory_limit(size_t bytes);

}  // namespace gradus::host
