// The profiler's Communication track: a collective waited on directly (Work::wait(), not only
// dist::wait_all) is a span there, around the time the caller blocked.
#include <cstring>

#include "dist/dist_test_util.h"
#include "gradus/monitor/profiler.h"

namespace gradus::testing {
namespace {

int count_comm(const monitor::Profile& p, const char* name) {
  int n = 0;
  for (const profiling::ThreadEvents& t : p.threads()) {
    for (const profiling::Event& e : t.events) {
      if (e.kind == profiling::Activity::comm && std::strcmp(e.name, name) == 0) {
        EXPECT_LE(e.start_ns, e.end_ns);
        ++n;
      }
    }
  }
  return n;
}

TEST(ProfiledWait, ADirectWaitIsOnTheCommunicationTrack) {
  if (!monitor::Profiler::available()) GTEST_SKIP() << "built with -DGRADUS_PROFILER=OFF";
  auto pg = dist::default_group();
  if (pg->size() == 1) GTEST_SKIP() << "a world of one completes collectives without waiting";
  monitor::Profiler profiler;
  Tensor t = ones({1024}, {.dtype = DType::f32});
  pg->all_reduce(t, dist::ReduceOp::sum, "direct")->wait();
  pg->all_reduce(t, dist::ReduceOp::sum, "direct")->wait();
  dist::wait_all({pg->all_reduce(t, dist::ReduceOp::sum, "grouped")});
  const monitor::Profile p = profiler.stop();
  EXPECT_EQ(count_comm(p, "all_reduce"), 3);
  EXPECT_EQ(count_comm(p, "Work.wait"), 3) << "two direct waits and the one inside wait_all";
  EXPECT_EQ(count_comm(p, "wait"), 1);
  EXPECT_EQ(t.to_vector<float>()[0], static_cast<float>(pg->size() * pg->size() * pg->size()));
}

}  // namespace
}  // namespace gradus::testing
