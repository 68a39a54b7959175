// The dist tests' main: joins the world (mpirun, or a world of one), runs every test on every
// rank, and prints full output on rank 0 only (the others print failures).
#include <gtest/gtest.h>

#include <cstdio>

#include "gradus/dist/dist.h"
#include "gradus/ops.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const gradus::dist::World& world = gradus::dist::init({.timeout_seconds = 120});
  if (world.rank != 0) GTEST_FLAG_SET(brief, true);
  const int rc = RUN_ALL_TESTS();
  // A failure on one rank must fail the job, whichever rank's exit code mpirun reports.
  gradus::Tensor failed = gradus::from_vector(std::vector<int64_t>{rc != 0 ? 1 : 0}, {1},
                                              {.dtype = gradus::DType::i64});
  gradus::dist::default_group()->all_reduce(failed, gradus::dist::ReduceOp::max)->wait();
  const bool any_failed = failed.to_vector<int64_t>()[0] != 0;
  if (world.rank == 0) {
    std::printf("dist tests: world of %d (%s): %s\n", world.size, world.launcher.c_str(),
                any_failed ? "FAILED on some rank" : "passed on every rank");
  }
  gradus::dist::finalize();
  return any_failed ? 1 : 0;
}
