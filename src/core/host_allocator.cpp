// The default CPU allocator: 64-byte aligned blocks (so vector loops and BLAS see aligned rows),
// with freed blocks of kMinCachedBlock bytes or more kept in per-size free lists up to a limit
// (see gradus/core/host_memory.h for why).
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/oom_hint.h"
#include "gradus/core/error.h"
#include "gradus/core/host_memory.h"
#include "gradus/core/storage.h"

#if defined(__SANITIZE_ADDRESS__)
#define GRADUS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GRADUS_ASAN 1
#endif
#endif

namespace gradus {
namespace {

constexpr size_t kPage = 4096;

std::string format_bytes(size_t b);

// Names the address-space limit when there is one: it, not the machine's memory, is then what
// ran out, and it counts mapped memory that tensors never touch.
std::string address_space_note() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return "";
  return "; the process's address-space limit (ulimit -v) is " +
         format_bytes(static_cast<size_t>(limit.rlim_cur));
}

std::string format_bytes(size_t b) {
  char buf[32];
  if (b >= (size_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1 << 30));
  } else if (b >= (size_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%zu bytes", b);
  }
  return buf;
}

// GRADUS_HOST_CACHE_MB, else 2 GiB (0 under AddressSanitizer, so that ASan sees every free).
size_t default_limit() {
  if (const char* env = std::getenv("GRADUS_HOST_CACHE_MB")) {
    char* end = nullptr;
    const unsigned long long mb = std::strtoull(env, &end, 10);
    if (end != env && *end == '\0' && env[0] != '-') return static_cast<size_t>(mb) << 20;
    std::fprintf(stderr,
                 "gradus: ignoring GRADUS_HOST_CACHE_MB='%s' (expected a whole number of MiB, "
                 "0 to turn the host memory cache off)\n",
                 env);
  }
#ifdef GRADUS_ASAN
  return 0;
#else
  return size_t{2} << 30;
#endif
}

class CachingHostAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, int) override {
    if (nbytes == 0) return nullptr;
    reserve(nbytes);
    try {
      return allocate_block(nbytes);
    } catch (...) {
      allocated_.fetch_sub(nbytes);
      throw;
    }
  }

  // Counts nbytes against the limit (throws OutOfMemoryError when it would be exceeded).
  void reserve(size_t nbytes) {
    const size_t limit = memory_limit_.load();
    const size_t now = allocated_.fetch_add(nbytes) + nbytes;
    if (limit != 0 && now > limit) {
      allocated_.fetch_sub(nbytes);
      num_ooms_.fetch_add(1);
      throw OutOfMemoryError(detail::str_cat(
          "cpu: out of memory allocating ", format_bytes(nbytes), " (gradus: ",
          format_bytes(now - nbytes), " allocated by tensors, limit ", format_bytes(limit),
          " set by --memory-limit or host::set_memory_limit; peak ", format_bytes(peak_.load()),
          "). ", detail::kOutOfMemoryHint, "; gradus::host::memory_stats() shows usage."));
    }
    size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    num_allocs_.fetch_add(1);
  }

  // (Called after reserve(nbytes): allocated_ already counts this request.)
  void* allocate_block(size_t nbytes) {
    const size_t size = block_size(nbytes);
    if (size >= host::kMinCachedBlock) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        ++hits_;
        return p;
      }
      ++misses_;
    }
    void* p = std::aligned_alloc(64, size);
    if (p == nullptr) {
      empty();  // the cache may hold what this allocation needs
      p = std::aligned_alloc(64, size);
    }
    if (p == nullptr) {
      num_ooms_.fetch_add(1);
      throw OutOfMemoryError(
          detail::str_cat("cpu: failed to allocate ", format_bytes(nbytes),
                          " of host memory (gradus: ", format_bytes(allocated_.load() - nbytes),
                          " allocated by tensors before this request", address_space_note(), "). ",
                          detail::kOutOfMemoryHint, "; gradus::host::memory_stats() shows usage."));
    }
    return p;
  }

  void deallocate(void* ptr, size_t nbytes, int) override {
    if (ptr == nullptr) return;
    allocated_.fetch_sub(nbytes);
    const size_t size = block_size(nbytes);
    if (size >= host::kMinCachedBlock) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + size <= limit_) {
        free_[size].push_back(ptr);
        cached_ += size;
        return;
      }
    }
    std::free(ptr);
  }

  host::MemoryStats memory() const {
    return {allocated_.load(), peak_.load(), memory_limit_.load(), num_allocs_.load(),
            num_ooms_.load()};
  }
  void reset_peak() { peak_.store(allocated_.load()); }
  void set_memory_limit(size_t bytes) { memory_limit_.store(bytes); }

  host::CacheStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {cached_, limit_, hits_, misses_};
  }

  void empty() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_all();
  }

  void set_limit(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
    if (cached_ > limit_) release_all();
  }

 private:
  // Sizes the C library is asked for: whole 64-byte lines, and whole pages for cached blocks
  // (so that tensors of slightly different sizes share a free list).
  static size_t block_size(size_t nbytes) {
    const size_t lines = (nbytes + 63) & ~size_t{63};
    return lines >= host::kMinCachedBlock ? (lines + kPage - 1) & ~(kPage - 1) : lines;
  }

  void release_all() {
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) std::free(p);
    }
    free_.clear();
    cached_ = 0;
  }

  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t limit_ = default_limit();
  uint64_t hits_ = 0, misses_ = 0;
  std::atomic<size_t> allocated_{0}, peak_{0}, memory_limit_{0};
  std::atomic<uint64_t> num_allocs_{0}, num_ooms_{0};
};

// Never destroyed: tensors in static storage are freed after static destructors have run.
CachingHostAllocator& host_allocator() {
  static auto* allocator = new CachingHostAllocator();
  return *allocator;
}

}  // namespace

Allocator* default_host_allocator() {
  return &host_allocator();
}

namespace host {

CacheStats cache_stats() {
  return host_allocator().stats();
}
void empty_cache() {
  host_allocator().empty();
}
void set_cache_limit(size_t bytes) {
  host_allocator().set_limit(bytes);
}
MemoryStats memory_stats() {
  return host_allocator().memory();
}
void reset_peak_memory() {
  host_allocator().reset_peak();
}
void set_memory_limit(size_t bytes) {
  host_allocator().set_memory_limit(bytes);
}

}  // namespace host
}  // namespace gradus
