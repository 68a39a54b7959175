// DeviceMonitor: the sampling thread, aggregates (energy from the counter or the integral of
// power), windows, JSON, and a clean stop — with the fake libnvidia-ml.
#include "gradus/monitor/monitor.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gradus/core/error.h"
#include "monitor/monitor_test_util.h"

namespace gradus::monitor {
namespace {

using namespace std::chrono_literals;
using gradus::testing::ScratchDir;
using MonitorTest = gradus::testing::FakeNvmlTest;

DeviceMonitor::Options fake(std::chrono::milliseconds interval) {
  return {.interval = interval, .nvml_library = GRADUS_FAKE_NVML};
}

TEST_F(MonitorTest, TheThreadSamplesEveryInterval) {
  ::setenv("FAKE_NVML_DEVICES", "2", 1);
  DeviceMonitor mon(fake(10ms));
  ASSERT_TRUE(mon.gpus_available()) << mon.status();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (mon.samples() < 6 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  mon.stop();
  const int64_t n = mon.samples();
  ASSERT_GE(n, 6);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(mon.samples(), n) << "stop() ended the thread";
  const Totals t = mon.totals();
  EXPECT_EQ(t.samples, n - 1);  // the reading at construction starts the window
  ASSERT_EQ(t.gpus.size(), 2u);
  // The fake's counter grows 1 J per reading: n readings span n - 1 joules per GPU.
  for (const GpuTotals& g : t.gpus) {
    EXPECT_TRUE(g.energy_from_counter);
    EXPECT_DOUBLE_EQ(*g.energy_j, static_cast<double>(n - 1));
  }
  EXPECT_DOUBLE_EQ(*t.gpu_energy_j(), 2.0 * static_cast<double>(n - 1));
  EXPECT_EQ(mon.latest().number, n - 1);
  EXPECT_EQ(mon.latest().gpus.size(), 2u);
}

TEST_F(MonitorTest, AggregatesOverManualReadings) {
  ::setenv("FAKE_NVML_DEVICES", "2", 1);
  DeviceMonitor mon(fake(0ms));  // no thread
  for (int i = 0; i < 5; ++i) mon.sample_now();
  EXPECT_EQ(mon.samples(), 6);
  const Totals t = mon.totals();
  EXPECT_EQ(t.samples, 5);
  EXPECT_GT(t.seconds, 0.0);
  ASSERT_EQ(t.gpus.size(), 2u);
  EXPECT_EQ(t.gpus[1].name, "Fake GPU 1");
  EXPECT_EQ(t.gpus[0].mean_util_percent, 40.0);
  EXPECT_EQ(t.gpus[1].peak_util_percent, 50.0);
  EXPECT_EQ(t.gpus[1].peak_memory_used_bytes, 11ull << 30);
  EXPECT_EQ(t.gpus[0].peak_power_w, 150.0);
  EXPECT_DOUBLE_EQ(*t.gpus[0].energy_j, 5.0);
  EXPECT_DOUBLE_EQ(*t.gpus[0].mean_power_w, 5.0 / t.seconds);
  EXPECT_DOUBLE_EQ(mon.energy_joules(), 10.0 + t.cpu_energy_j.value_or(0));
  ASSERT_TRUE(t.peak_rss_bytes);
  EXPECT_GT(*t.peak_rss_bytes, 0u);
}

TEST_F(MonitorTest, EnergyIsTheIntegralOfPowerWithoutACounter) {
  ::setenv("FAKE_NVML_UNSUPPORTED", "energy", 1);
  ::setenv("FAKE_NVML_POWER_MW", "200000", 1);
  DeviceMonitor mon(fake(0ms));
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(10ms);
    mon.sample_now();
  }
  const Totals t = mon.totals();
  ASSERT_TRUE(t.gpus[0].energy_j);
  EXPECT_FALSE(t.gpus[0].energy_from_counter);
  EXPECT_NEAR(*t.gpus[0].energy_j, 200.0 * t.seconds, 1e-9);
  EXPECT_GE(t.seconds, 0.03);
}

TEST_F(MonitorTest, WindowsSplitTheTotals) {
  DeviceMonitor mon(fake(0ms));
  mon.sample_now();
  mon.sample_now();
  const Totals first = mon.take_window();  // takes a reading itself
  EXPECT_EQ(first.samples, 3);
  EXPECT_DOUBLE_EQ(*first.gpu_energy_j(), 3.0);
  mon.sample_now();
  const Totals second = mon.take_window();
  EXPECT_EQ(second.samples, 2);
  EXPECT_DOUBLE_EQ(*second.gpu_energy_j(), 2.0);
  const Totals all = mon.totals();
  EXPECT_EQ(all.samples, 5);
  EXPECT_DOUBLE_EQ(*all.gpu_energy_j(), 5.0);
  EXPECT_NEAR(all.seconds, first.seconds + second.seconds, 1e-9);
}

TEST_F(MonitorTest, JsonHasFlatKeysForWhatWasMeasured) {
  ::setenv("FAKE_NVML_DEVICES", "2", 1);
  DeviceMonitor mon(fake(0ms));
  mon.sample_now();
  const std::string json = mon.to_json();
  EXPECT_EQ(json.find("{\"gpu_util_percent\":45.0,\"gpu_util_peak_percent\":50.0,"
                      "\"gpu_memory_peak_bytes\":11811160064,\"gpu_power_w\":"),
            0u)
      << json;
  EXPECT_NE(json.find("\"gpu_energy_j\":2.0,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"rss_peak_bytes\":"), std::string::npos) << json;
  EXPECT_NE(json.find("\"monitor_samples\":1,"), std::string::npos) << json;
}

TEST_F(MonitorTest, WithoutNvmlItStillReadsTheHost) {
  DeviceMonitor mon({.interval = 0ms, .nvml_library = "/nonexistent/libnvidia-ml.so.1"});
  EXPECT_FALSE(mon.gpus_available());
  EXPECT_EQ(mon.nvml_status().rfind("NVML not available: /nonexistent/libnvidia-ml.so.1", 0), 0u)
      << mon.nvml_status();
  const Snapshot s = mon.sample_now();
  EXPECT_TRUE(s.gpus.empty());
  ASSERT_TRUE(s.cpu.rss_bytes);
  EXPECT_GT(*s.cpu.rss_bytes, 0u);
  const std::string json = mon.to_json();
  EXPECT_EQ(json.find("gpu_"), std::string::npos) << json;
  EXPECT_NE(json.find("\"rss_peak_bytes\":"), std::string::npos) << json;
  EXPECT_FALSE(mon.totals().gpu_energy_j());

  DeviceMonitor cpu_only({.interval = 0ms, .nvml = false});
  EXPECT_EQ(cpu_only.nvml_status(), "NVML not used");
}

TEST_F(MonitorTest, RaplEnergyIsInTheTotals) {
  ScratchDir dir;
  dir.write("intel-rapl:0/name", "package-0\n");
  dir.write("intel-rapl:0/max_energy_range_uj", "262143328850\n");
  dir.write("intel-rapl:0/energy_uj", "1000000\n");
  DeviceMonitor::Options o{.interval = 0ms, .nvml = false};
  o.cpu.powercap_root = dir.path().string();
  DeviceMonitor mon(o);
  dir.write("intel-rapl:0/energy_uj", "3500000\n");
  mon.sample_now();
  EXPECT_EQ(mon.totals().cpu_energy_j, 2.5);
  EXPECT_DOUBLE_EQ(mon.energy_joules(), 2.5);
  EXPECT_NE(mon.to_json().find("\"cpu_energy_j\":2.5"), std::string::npos) << mon.to_json();
}

// What a training progress line shows: the GPUs' mean utilisation, summed memory and power when
// there are GPUs (fake: 40 % and 50 %, 10 and 11 of 80 GiB, 150 and 151 W), the process otherwise.
TEST_F(MonitorTest, ProgressTextShowsTheGpusWhenThereAreAny) {
  ::setenv("FAKE_NVML_DEVICES", "2", 1);
  DeviceMonitor mon(fake(0ms));
  EXPECT_EQ(progress_text(mon.sample_now()), "GPU 45% 21.0/160.0 GiB 301 W");
  ::setenv("FAKE_NVML_UNSUPPORTED", "power,util", 1);
  EXPECT_EQ(progress_text(mon.sample_now()), "GPU 21.0/160.0 GiB");
  ::setenv("FAKE_NVML_UNSUPPORTED", "power,util,memory", 1);
  EXPECT_EQ(progress_text(mon.sample_now()), "") << "no GPU reading: nothing to show";
}

TEST_F(MonitorTest, ProgressTextShowsTheProcessWithoutGpus) {
  DeviceMonitor mon({.interval = 0ms, .nvml = false});
  const Snapshot first = mon.latest();  // the reading at construction: no CPU interval yet
  EXPECT_FALSE(first.cpu.process_util_percent);
  EXPECT_EQ(progress_text(first).rfind("RSS ", 0), 0u) << progress_text(first);
  // Burn some CPU so the next reading has an interval of at least 10 ms with work in it.
  const auto until = std::chrono::steady_clock::now() + 30ms;
  volatile double x = 0;
  while (std::chrono::steady_clock::now() < until) x = x + 1;
  const std::string text = progress_text(mon.sample_now());
  EXPECT_TRUE(text.starts_with("CPU ")) << text;
  EXPECT_NE(text.find("% RSS "), std::string::npos) << text;
  EXPECT_TRUE(text.ends_with(" MiB")) << text;
  Snapshot none;
  EXPECT_EQ(progress_text(none), "");
}

// measured_energy_j: null (empty) when nothing measures energy, rather than 0 J; and its source.
TEST_F(MonitorTest, MeasuredEnergyIsEmptyWithoutASource) {
  DeviceMonitor::Options o{.interval = 0ms, .nvml = false};
  o.cpu.powercap_root = "/nonexistent/powercap";
  DeviceMonitor mon(o);
  mon.sample_now();
  const Totals t = mon.take_window();
  EXPECT_FALSE(t.measured_energy_j());
  EXPECT_EQ(t.energy_source(), "");
  EXPECT_EQ(t.energy_j(), 0.0);
}

TEST_F(MonitorTest, MeasuredEnergyNamesItsSource) {
  DeviceMonitor::Options o = fake(0ms);
  o.cpu.powercap_root = "/nonexistent/powercap";
  DeviceMonitor counter(o);
  counter.sample_now();
  const Totals c = counter.take_window();  // two readings after construction: 2 J
  ASSERT_TRUE(c.measured_energy_j());
  EXPECT_DOUBLE_EQ(*c.measured_energy_j(), 2.0);
  EXPECT_EQ(c.energy_source(), "nvml-counter");

  ::setenv("FAKE_NVML_UNSUPPORTED", "energy", 1);
  DeviceMonitor integral(o);
  std::this_thread::sleep_for(10ms);
  const Totals i = integral.take_window();
  ASSERT_TRUE(i.measured_energy_j());
  EXPECT_NEAR(*i.measured_energy_j(), 150.0 * i.seconds, 1e-9);
  EXPECT_EQ(i.energy_source(), "nvml-power-integral");

  ScratchDir dir;
  dir.write("intel-rapl:0/name", "package-0\n");
  dir.write("intel-rapl:0/max_energy_range_uj", "262143328850\n");
  dir.write("intel-rapl:0/energy_uj", "1000000\n");
  DeviceMonitor::Options r{.interval = 0ms, .nvml = false};
  r.cpu.powercap_root = dir.path().string();
  DeviceMonitor rapl(r);
  dir.write("intel-rapl:0/energy_uj", "1500000\n");
  const Totals p = rapl.take_window();
  EXPECT_DOUBLE_EQ(*p.measured_energy_j(), 0.5);
  EXPECT_EQ(p.energy_source(), "rapl");
}

TEST_F(MonitorTest, StopsAtOnceWhateverTheInterval) {
  const auto start = std::chrono::steady_clock::now();
  {
    DeviceMonitor mon(fake(std::chrono::hours(1)));
    EXPECT_EQ(mon.samples(), 1);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST_F(MonitorTest, ReadersDoNotRaceTheThread) {
  DeviceMonitor mon(fake(1ms));
  std::atomic<bool> done{false};
  std::thread manual([&] {
    while (!done) mon.sample_now();
  });
  for (int i = 0; i < 200; ++i) {
    const Snapshot s = mon.latest();
    const Totals t = mon.totals();
    EXPECT_EQ(s.gpus.size(), 1u);
    EXPECT_LE(t.samples, mon.samples());
  }
  done = true;
  manual.join();
  mon.stop();
  const Totals t = mon.totals();
  EXPECT_EQ(t.samples, mon.samples() - 1);
  EXPECT_DOUBLE_EQ(*t.gpu_energy_j(), static_cast<double>(t.samples));
}

TEST_F(MonitorTest, AnUnknownGpuIsAnError) {
  EXPECT_THROW(DeviceMonitor({.interval = 0ms, .nvml_library = GRADUS_FAKE_NVML, .gpus = {3}}),
               ValueError);
  DeviceMonitor one({.interval = 0ms, .nvml_library = GRADUS_FAKE_NVML, .gpus = {0}});
  EXPECT_EQ(one.latest().gpus.size(), 1u);
}

}  // namespace
}  // namespace gradus::monitor
