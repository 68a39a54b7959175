// Host readings: this process's /proc entries, a fake /proc tree, and RAPL counters in a fake
// sysfs tree (including a counter that wraps around).
#include "gradus/monitor/cpu.h"

#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include "monitor/monitor_test_util.h"

namespace gradus::monitor {
namespace {

using gradus::testing::ScratchDir;

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TEST(CpuSampler, ReadsThisProcess) {
  CpuSampler sampler;
  // Busy for 50 ms of CPU time (not wall time: the machine may be shared), five kernel ticks.
  const double start = process_cpu_seconds();
  volatile double sink = 0;
  while (process_cpu_seconds() - start < 0.05) sink = sink + 1.0;
  const CpuSample s = sampler.sample();
  ASSERT_TRUE(s.rss_bytes);
  EXPECT_GT(*s.rss_bytes, 1u << 20);
  ASSERT_TRUE(s.process_util_percent);
  EXPECT_GT(*s.process_util_percent, 0.0);
  ASSERT_TRUE(s.system_util_percent);
  EXPECT_GE(*s.system_util_percent, 0.0);
  EXPECT_LE(*s.system_util_percent, 100.0);
}

TEST(CpuSampler, ReadsAFakeProcTree) {
  ScratchDir dir;
  // A command name with spaces and parentheses: fields are counted from the last ')'.
  const std::string head = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194304 100 0 0 0 ";
  dir.write("4242/stat", head + "300 100 0 0 20 0 1 0 100 1000 50\n");
  dir.write("4242/statm", "1000 250 100 10 0 200 0\n");
  dir.write("stat", "cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n");
  CpuSampler sampler({.pid = 4242,
                      .proc_root = dir.path().string(),
                      .powercap_root = (dir.path() / "none").string()});
  usleep(20000);  // rates need 10 ms between readings
  dir.write("4242/stat", head + "500 200 0 0 20 0 1 0 100 1000 50\n");
  // 300 more busy ticks (user + system) and 100 more idle ones: 75 % busy.
  dir.write("stat", "cpu  300 0 200 800 100 0 0 0 0 0\n");
  const CpuSample s = sampler.sample();
  EXPECT_EQ(s.rss_bytes, 250u * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)));
  ASSERT_TRUE(s.system_util_percent);
  EXPECT_DOUBLE_EQ(*s.system_util_percent, 75.0);
  ASSERT_TRUE(s.process_util_percent);  // 300 ticks (3 s at 100 Hz) in about 20 ms
  EXPECT_GT(*s.process_util_percent, 100.0);
  // Back to back, a reading has no rates: a tick more or less would dominate them.
  const CpuSample again = sampler.sample();
  EXPECT_FALSE(again.process_util_percent);
  EXPECT_FALSE(again.system_util_percent);
  EXPECT_TRUE(again.rss_bytes);
  EXPECT_FALSE(s.package_energy_j);
  EXPECT_FALSE(s.package_power_w);
}

TEST(CpuSampler, AMissingProcessHasNoProcessReadings) {
  ScratchDir dir;
  dir.write("stat", "cpu  100 0 100 700 100 0 0 0 0 0\n");
  CpuSampler sampler({.pid = 99999, .proc_root = dir.path().string()});
  const CpuSample s = sampler.sample();
  EXPECT_FALSE(s.rss_bytes);
  EXPECT_FALSE(s.process_util_percent);
}

// Two packages (one about to wrap), one of their subdomains and the platform domain (psys).
void write_rapl(const ScratchDir& dir, uint64_t package0, uint64_t package1, uint64_t core,
                uint64_t psys) {
  dir.write("intel-rapl:0/name", "package-0\n");
  dir.write("intel-rapl:0/max_energy_range_uj", "262143328850\n");
  dir.write("intel-rapl:0/energy_uj", std::to_string(package0) + "\n");
  dir.write("intel-rapl:0:0/name", "core\n");
  dir.write("intel-rapl:0:0/max_energy_range_uj", "262143328850\n");
  dir.write("intel-rapl:0:0/energy_uj", std::to_string(core) + "\n");
  dir.write("intel-rapl:1/name", "package-1\n");
  dir.write("intel-rapl:1/max_energy_range_uj", "262143328850\n");
  dir.write("intel-rapl:1/energy_uj", std::to_string(package1) + "\n");
  dir.write("intel-rapl:2/name", "psys\n");
  dir.write("intel-rapl:2/max_energy_range_uj", "262143328850\n");
  dir.write("intel-rapl:2/energy_uj", std::to_string(psys) + "\n");
}

TEST(RaplReader, SumsPackagesAcrossAWraparound) {
  ScratchDir dir;
  write_rapl(dir, 262143000000, 5000000, 1000, 1000);
  RaplReader rapl(dir.path().string());
  ASSERT_TRUE(rapl.available());
  EXPECT_EQ(rapl.status(), "RAPL: 2 packages");
  EXPECT_EQ(rapl.energy_joules(), 0.0);
  // Package 0 passes its range: 328850 uJ to the top, then 671150 from 0 (1 J); package 1 uses
  // 2 J; the core and psys counters are not added (they are parts of, or contain, packages).
  write_rapl(dir, 671150, 7000000, 900000000, 100000000);
  EXPECT_DOUBLE_EQ(*rapl.energy_joules(), 3.0);
  write_rapl(dir, 1671150, 7500000, 900000000, 100000000);
  EXPECT_DOUBLE_EQ(*rapl.energy_joules(), 4.5);
}

TEST(RaplReader, SaysWhyItIsAbsent) {
  ScratchDir dir;
  RaplReader none(dir.path().string());
  EXPECT_FALSE(none.available());
  EXPECT_EQ(none.status(),
            "RAPL not available: no intel-rapl package under " + dir.path().string());
  EXPECT_FALSE(none.energy_joules());
  dir.write("intel-rapl:0/name", "package-0\n");  // energy_uj missing, as if unreadable
  RaplReader unreadable(dir.path().string());
  EXPECT_FALSE(unreadable.available());
  EXPECT_NE(unreadable.status().find("cannot read " + (dir.path() / "intel-rapl:0").string() +
                                     "/energy_uj (root only"),
            std::string::npos)
      << unreadable.status();
}

TEST(CpuSampler, PackagePowerFromRapl) {
  ScratchDir dir;
  write_rapl(dir, 1000000, 1000000, 0, 0);
  CpuSampler sampler({.powercap_root = dir.path().string()});
  usleep(20000);
  write_rapl(dir, 2000000, 3000000, 0, 0);
  const CpuSample s = sampler.sample();
  EXPECT_EQ(s.package_energy_j, 3.0);
  ASSERT_TRUE(s.package_power_w);
  EXPECT_GT(*s.package_power_w, 0.0);
  EXPECT_LT(*s.package_power_w, 3.0 / 0.02 * 1.001);
}

}  // namespace
}  // namespace gradus::monitor
