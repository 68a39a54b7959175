// The host block cache: freed large blocks are reused, small ones are not cached, the limit holds,
// and a reused block carries no stale view of the old tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

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

}  // namespace
}  // namespace gradus
