// How the CPU kernels split work over OpenMP threads: small work stays on the calling thread.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <thread>

#include "backend/cpu/loops.h"
#include "gradus/core/threads.h"

namespace gradus::backend::cpu {
namespace {

class ThreadsFor : public ::testing::Test {
 protected:
  void SetUp() override { ::gradus::set_num_threads(4); }
  void TearDown() override { ::gradus::set_num_threads(keep_); }
  int keep_ = ::gradus::get_num_threads();
};

TEST_F(ThreadsFor, OneThreadBelowTwoGrainsThenOnePerGrainUpToTheTeam) {
  EXPECT_EQ(threads_for(0, 1000), 1);
  EXPECT_EQ(threads_for(999, 1000), 1);
  EXPECT_EQ(threads_for(1999, 1000), 1);
  EXPECT_EQ(threads_for(2000, 1000), 2);
  EXPECT_EQ(threads_for(3500, 1000), 3);
  EXPECT_EQ(threads_for(int64_t{1} << 40, 1000), 4);
  EXPECT_EQ(threads_for(5, 0), 4);  // a grain of 0 counts as 1
}

TEST_F(ThreadsFor, ParallelForBelowTheGrainRunsOnTheCallingThreadOnce) {
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  bool same_thread = true, in_team = false;
  parallel_for(100, 1000, [&](int64_t begin, int64_t end) {
    ++calls;
    same_thread = same_thread && std::this_thread::get_id() == caller;
    in_team = in_team || omp_in_parallel();
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 100);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(same_thread);
  EXPECT_FALSE(in_team);
}

TEST_F(ThreadsFor, ParallelForAboveTheGrainCoversTheRangeOnceWithATeam) {
  std::atomic<int64_t> covered{0};
  std::atomic<int> parts{0};
  std::atomic<bool> in_team{true};
  parallel_for(4000, 1000, [&](int64_t begin, int64_t end) {
    covered += end - begin;
    ++parts;
    if (!omp_in_parallel()) in_team = false;
  });
  EXPECT_EQ(covered.load(), 4000);
  EXPECT_EQ(parts.load(), 4);
  EXPECT_TRUE(in_team.load());
}

}  // namespace
}  // namespace gradus::backend::cpu
