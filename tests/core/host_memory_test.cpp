// The host block cache: freed large blocks are reused, small ones are not cached, the limit holds,
// and a reused block carries no stale view of the old tensor.
#include <gtest/gtest.h>

#include <cstdio>

#include <cmath>
#include <thread>
#include <vector>

#include "core/oom_hint.h"
#include "gradus/gradus.h"

namespace gradus {
namespace {

// Sets a cache limit for one test and restores the previous one (the default differs between
// normal and AddressSanitizer builds).
class HostCache : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_limit_ = host::cache_stats().limit_bytes;
    host::empty_cache();
    host::set_cache_limit(size_t{64} << 20);
  }
  void TearDown() override {
    host::empty_cache();
    host::set_cache_limit(previous_limit_);
  }
  size_t previous_limit_ = 0;
};

TEST_F(HostCache, FreedLargeBlockIsReusedForTheSameSize) {
  const host::CacheStats before = host::cache_stats();
  const void* first = nullptr;
  {
    Tensor t = randn({512, 1024});  // 2 MiB
    first = t.raw_data();
  }
  EXPECT_EQ(host::cache_stats().cached_bytes, size_t{2} << 20);
  Tensor u = full({1024, 512}, 3.25);  // same byte size, another shape
  EXPECT_EQ(u.raw_data(), first);
  EXPECT_EQ(host::cache_stats().hits, before.hits + 1);
  EXPECT_EQ(host::cache_stats().cached_bytes, 0u);
  // The reused block holds the new tensor's values, not the old ones.
  EXPECT_EQ(max(u).item(), 3.25);
  EXPECT_EQ(min(u).item(), 3.25);
}

TEST_F(HostCache, SmallBlocksAreNotCached) {
  { Tensor t = randn({100}); }
  EXPECT_EQ(host::cache_stats().cached_bytes, 0u);
}

TEST_F(HostCache, LimitIsNeverExceededAndZeroTurnsCachingOff) {
  host::set_cache_limit(size_t{3} << 20);
  {
    std::vector<Tensor> ts;
    for (int i = 0; i < 4; ++i) ts.push_back(randn({256, 1024}));  // 1 MiB each
  }
  EXPECT_EQ(host::cache_stats().cached_bytes, size_t{3} << 20);
  host::set_cache_limit(0);
  EXPECT_EQ(host::cache_stats().cached_bytes, 0u);
  { Tensor t = randn({256, 1024}); }
  EXPECT_EQ(host::cache_stats().cached_bytes, 0u);
}

TEST_F(HostCache, EmptyCacheReturnsEverything) {
  { Tensor t = randn({256, 1024}); }
  EXPECT_GT(host::cache_stats().cached_bytes, 0u);
  host::empty_cache();
  EXPECT_EQ(host::cache_stats().cached_bytes, 0u);
}

TEST_F(HostCache, ConcurrentAllocationAndFreeKeepTheAccountsRight) {
  auto work = [] {
    for (int i = 0; i < 200; ++i) {
      Tensor t = randn({64 + (i % 7), 1024});
      ASSERT_TRUE(std::isfinite(t.sum().item()));
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  const host::CacheStats s = host::cache_stats();
  EXPECT_LE(s.cached_bytes, s.limit_bytes);
  EXPECT_GT(s.hits, 0u);
}

// Memory accounting of CPU tensors: current and peak bytes follow allocations exactly; a limit
// turns an allocation into an OutOfMemoryError that says what is allocated and what the limit is,
// and leaves the accounts as they were (nothing leaks through the failed allocation).
TEST(HostMemory, CurrentPeakAndLimit) {
  const host::MemoryStats base = host::memory_stats();
  host::reset_peak_memory();
  {
    Tensor a = empty({1000}, {DType::f32});  // 4000 bytes
    Tensor b = empty({250}, {DType::f64});   // 2000 bytes
    const host::MemoryStats s = host::memory_stats();
    EXPECT_EQ(s.allocated_bytes, base.allocated_bytes + 6000);
    EXPECT_GE(s.peak_allocated_bytes, base.allocated_bytes + 6000);
    EXPECT_EQ(s.num_allocs, base.num_allocs + 2);
  }
  EXPECT_EQ(host::memory_stats().allocated_bytes, base.allocated_bytes);
  EXPECT_GE(host::memory_stats().peak_allocated_bytes, base.allocated_bytes + 6000);
  host::reset_peak_memory();
  EXPECT_EQ(host::memory_stats().peak_allocated_bytes, base.allocated_bytes);

  host::set_memory_limit(base.allocated_bytes + (size_t{1} << 20));  // 1 MiB of headroom
  Tensor fits = empty({100000}, {DType::f32});                       // 400 kB
  try {
    Tensor too_big = empty({200000}, {DType::f32});  // 800 kB more: over the limit
    ADD_FAILURE() << "allocated past the limit";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory allocating 781.2 KiB"), std::string::npos) << m;
    EXPECT_NE(m.find("--memory-limit"), std::string::npos) << m;
    // The same remedies as the GPU's message (tests/cli checks that each option exists).
    EXPECT_NE(m.find(std::string(detail::kOutOfMemoryHint) +
                     "; gradus::host::memory_stats() shows usage."),
              std::string::npos)
        << m;
  }
  EXPECT_EQ(host::memory_stats().allocated_bytes, base.allocated_bytes + 400000);
  EXPECT_EQ(host::memory_stats().num_ooms, base.num_ooms + 1);
  host::set_memory_limit(0);
  Tensor now_fits = empty({200000}, {DType::f32});
  EXPECT_EQ(host::memory_stats().limit_bytes, 0u);
}

// When the C library refuses (here: more than the address space), the message counts what tensors
// held before the request, not the request itself, and the accounts are left as they were.
TEST(HostMemory, FailedAllocationIsNotCountedAsAllocated) {
  const host::MemoryStats base = host::memory_stats();
  Tensor held = empty({262144}, {DType::f32});  // 1 MiB
  const size_t before = host::memory_stats().allocated_bytes;
  try {
    Tensor impossible = empty({int64_t{1} << 58}, {DType::f32});  // 1 EiB
    ADD_FAILURE() << "allocated 1 EiB";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("failed to allocate 1073741824.00 GiB"), std::string::npos) << m;
    char expected[96];
    std::snprintf(expected, sizeof(expected), "(gradus: %.1f MiB allocated by tensors before",
                  static_cast<double>(before) / (1 << 20));
    EXPECT_NE(m.find(expected), std::string::npos) << m;
  }
  EXPECT_EQ(host::memory_stats().allocated_bytes, before);
  EXPECT_EQ(host::memory_stats().num_ooms, base.num_ooms + 1);
}

// The batch-size finder under a CPU limit: the batch it picks fits, twice it does not, and the
// failed tries leak nothing.
TEST(HostMemory, BatchSizeFinderPicksABatchThatFitsAndLeaksNothing) {
  const size_t base = host::memory_stats().allocated_bytes;
  const uint64_t ooms = host::memory_stats().num_ooms;
  // A "step" holding two [b, 1024] float32 activations (8 KiB per example) at once.
  auto step = [](int64_t b) {
    Tensor a = randn({b, 1024});
    Tensor c = mul(a, 2.0);
    ASSERT_TRUE(std::isfinite(c.sum().item()));
  };
  host::set_memory_limit(base + (size_t{3} << 20));  // 3 MiB: at most ~384 examples
  const BatchSizeResult r = find_batch_size(step, {.start = 16, .max = 100000});
  host::set_memory_limit(0);
  EXPECT_GT(r.largest_fit, 256);
  EXPECT_LT(r.largest_fit, 384);
  EXPECT_GT(r.smallest_fail, r.largest_fit);
  EXPECT_LE(r.batch_size, r.largest_fit);
  EXPECT_GT(host::memory_stats().num_ooms, ooms);
  EXPECT_EQ(host::memory_stats().allocated_bytes, base) << "a failed try leaked";
  host::set_memory_limit(base + (size_t{3} << 20));
  EXPECT_NO_THROW(step(r.batch_size));
  EXPECT_THROW(step(2 * r.batch_size), OutOfMemoryError);
  host::set_memory_limit(0);
  // Not even the smallest batch fits: a clear error.
  host::set_memory_limit(base + 1024);
  EXPECT_THROW(find_batch_size(step, {.start = 4}), OutOfMemoryError);
  host::set_memory_limit(0);
}

}  // namespace
}  // namespace gradus
