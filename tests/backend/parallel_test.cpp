// How the CPU kernels split work over OpenMP threads: small work stays on the calling thread.
#include <gtest/gtest.h>
#include <omp.h>

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "gradus/core/error.h"
#include "gradus/ops.h"

#include "backend/cpu/blas_address_space.h"
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

// Mapped address space now (/proc/self/statm).
size_t mapped_bytes() {
  unsigned long pages = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr || std::fscanf(f, "%lu", &pages) != 1) pages = 0;
  if (f != nullptr) std::fclose(f);
  return pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Lowers the address-space limit to what is mapped now plus `room` (in the death test's own,
// freshly started process: a forked child would inherit an OpenMP team it cannot use).
void limit_address_space_to_mapped_plus(size_t room) {
  const rlimit limit{mapped_bytes() + room, RLIM_INFINITY};
  if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(90);
}

class BlasUnderAddressLimit : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// Room for the BLAS buffers of two threads, not of sixteen: set_num_threads(16) runs as many as
// fit, and matrix products on them (each thread calling the BLAS) finish.
[[noreturn]] void sixteen_threads_and_matmuls_in_room_for_two() {
  ::alarm(60);  // a hang (OpenBLAS waiting for a mapping that never comes) ends by a signal
  limit_address_space_to_mapped_plus(blas_address_space_bytes(2));
  ::gradus::set_num_threads(16);
  const int threads = ::gradus::get_num_threads();
  if (threads < 1 || threads >= 16) ::_exit(10);
  const Tensor a = randn({256, 256});
  const Tensor b = randn({256, 256});
  for (int i = 0; i < 20; ++i) (void)matmul(a, b);
  ::_exit(0);
}

TEST_F(BlasUnderAddressLimit, MoreThreadsThanFitAreCappedAndMatmulsStillRun) {
  EXPECT_EXIT(sixteen_threads_and_matmuls_in_room_for_two(), ::testing::ExitedWithCode(0),
              "room for [0-9]+ of the 16 threads");
}

TEST_F(BlasUnderAddressLimit, NoRoomForOneThreadIsAnOutOfMemoryError) {
  EXPECT_EXIT(
      {
        ::alarm(60);
        limit_address_space_to_mapped_plus(8 * kMiB);
        try {
          ::gradus::set_num_threads(4);
        } catch (const ::gradus::OutOfMemoryError& e) {
          std::fprintf(stderr, "%s\n", e.what());
          ::_exit(0);
        }
        ::_exit(12);
      },
      ::testing::ExitedWithCode(0),
      "address-space limit \\(ulimit -v\\) of [0-9]+ MiB leaves no room");
}

}  // namespace
}  // namespace gradus::backend::cpu
