// The NVML loader against the fake libnvidia-ml (tests/monitor/fake_nvml.c).
#include "gradus/monitor/nvml.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "monitor/monitor_test_util.h"

namespace gradus::monitor {
namespace {

using NvmlTest = gradus::testing::FakeNvmlTest;

TEST_F(NvmlTest, ReadsEveryFieldFromTheFakeLibrary) {
  ::setenv("FAKE_NVML_DEVICES", "2", 1);
  Nvml nvml(GRADUS_FAKE_NVML);
  ASSERT_TRUE(nvml.available()) << nvml.status();
  EXPECT_EQ(nvml.status(), "NVML 999.99.fake, 2 GPUs");
  EXPECT_EQ(nvml.driver_version(), "999.99.fake");
  ASSERT_EQ(nvml.device_count(), 2);
  const GpuSample s = nvml.sample(1);
  EXPECT_EQ(s.index, 1);
  EXPECT_EQ(s.name, "Fake GPU 1");
  EXPECT_EQ(s.util_percent, 50.0);
  EXPECT_EQ(s.memory_util_percent, 20.0);
  EXPECT_EQ(s.memory_used_bytes, 11ull << 30);
  EXPECT_EQ(s.memory_total_bytes, 80ull << 30);
  EXPECT_EQ(s.power_w, 151.0);
  EXPECT_EQ(s.power_limit_w, 300.0);
  EXPECT_EQ(s.temperature_c, 55.0);
  EXPECT_EQ(s.sm_clock_mhz, 1410.0);
  EXPECT_EQ(s.memory_clock_mhz, 1215.0);
  EXPECT_EQ(s.clock_event_reasons, 0x5u);
  EXPECT_EQ(s.pcie_tx_bytes_per_s, 1000.0 * 1024);
  EXPECT_EQ(s.pcie_rx_bytes_per_s, 2000.0 * 1024);
  EXPECT_EQ(s.energy_counter_j, 5000.001);
  EXPECT_EQ(nvml.sample(0).name, "Fake GPU 0");
  EXPECT_EQ(nvml.sample(0).util_percent, 40.0);
  EXPECT_FALSE(nvml.sample(2).util_percent) << "an index NVML does not have reads nothing";
}

TEST_F(NvmlTest, PcieIsReadOnlyWhenAskedFor) {
  Nvml nvml(GRADUS_FAKE_NVML);
  nvml.set_read_pcie(false);
  const GpuSample s = nvml.sample(0);
  EXPECT_FALSE(s.pcie_tx_bytes_per_s);
  EXPECT_FALSE(s.pcie_rx_bytes_per_s);
  EXPECT_TRUE(s.power_w);
}

TEST_F(NvmlTest, TheEnvironmentChoosesTheLibrary) {
  ::setenv("GRADUS_NVML_LIBRARY", GRADUS_FAKE_NVML, 1);
  Nvml nvml;
  EXPECT_TRUE(nvml.available()) << nvml.status();
  EXPECT_EQ(nvml.device_count(), 1);
}

TEST_F(NvmlTest, AMissingLibraryIsAStatusNotAnError) {
  Nvml nvml("/nonexistent/libnvidia-ml.so.1");
  EXPECT_FALSE(nvml.available());
  EXPECT_EQ(nvml.status().rfind("NVML not available: /nonexistent/libnvidia-ml.so.1", 0), 0u)
      << nvml.status();
  EXPECT_EQ(nvml.device_count(), 0);
  EXPECT_FALSE(nvml.sample(0).util_percent);
}

TEST_F(NvmlTest, ALibraryWithoutNvmlIsAStatus) {
  Nvml nvml("libc.so.6");
  EXPECT_FALSE(nvml.available());
  EXPECT_NE(nvml.status().find("libc.so.6 lacks nvmlInit_v2"), std::string::npos) << nvml.status();
}

TEST_F(NvmlTest, InitFailureIsAStatusWithNvmlsReason) {
  ::setenv("FAKE_NVML_INIT_RC", "9", 1);  // NVML_ERROR_DRIVER_NOT_LOADED
  Nvml nvml(GRADUS_FAKE_NVML);
  EXPECT_FALSE(nvml.available());
  EXPECT_EQ(nvml.status(), "NVML not available: nvmlInit_v2 failed: Driver Not Loaded");
  EXPECT_EQ(nvml.device_count(), 0);
}

TEST_F(NvmlTest, UnsupportedReadingsAreAbsent) {
  ::setenv("FAKE_NVML_UNSUPPORTED", "power,temperature,energy,clock_events", 1);
  Nvml nvml(GRADUS_FAKE_NVML);
  ASSERT_TRUE(nvml.available());
  const GpuSample s = nvml.sample(0);
  EXPECT_FALSE(s.power_w);
  EXPECT_FALSE(s.temperature_c);
  EXPECT_FALSE(s.energy_counter_j);
  EXPECT_FALSE(s.clock_event_reasons);
  EXPECT_EQ(s.power_limit_w, 300.0) << "power_limit is not 'power'";
  EXPECT_EQ(s.util_percent, 40.0);
  EXPECT_EQ(s.memory_used_bytes, 10ull << 30);
}

TEST_F(NvmlTest, MissingFunctionsAreAbsent) {
  Nvml nvml(GRADUS_FAKE_NVML_MINIMAL);  // no energy counter, clock events or PCIe
  ASSERT_TRUE(nvml.available()) << nvml.status();
  const GpuSample s = nvml.sample(0);
  EXPECT_FALSE(s.energy_counter_j);
  EXPECT_FALSE(s.clock_event_reasons);
  EXPECT_FALSE(s.pcie_tx_bytes_per_s);
  EXPECT_EQ(s.power_w, 150.0);
  EXPECT_EQ(s.sm_clock_mhz, 1410.0);
}

TEST_F(NvmlTest, NoGpusIsAvailableWithNoDevices) {
  ::setenv("FAKE_NVML_DEVICES", "0", 1);
  Nvml nvml(GRADUS_FAKE_NVML);
  EXPECT_TRUE(nvml.available());
  EXPECT_EQ(nvml.status(), "NVML 999.99.fake, 0 GPUs");
  EXPECT_EQ(nvml.device_count(), 0);
}

TEST(ClockEventReasons, NamesEachBit) {
  EXPECT_EQ(describe_clock_event_reasons(0), "none");
  EXPECT_EQ(describe_clock_event_reasons(0x5), "idle+power-cap");
  EXPECT_EQ(describe_clock_event_reasons(0x40 | 0x8), "hw-slowdown+hw-thermal");
  EXPECT_EQ(describe_clock_event_reasons(1ull << 40), "other");
}

}  // namespace
}  // namespace gradus::monitor
