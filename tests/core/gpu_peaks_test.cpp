// cuda::peak_flops against the peaks NVIDIA publishes for A100 and H100 (SXM, dense), which the
// per-SM rate table must reproduce from the SM count and clock alone.
#include <gtest/gtest.h>

#include <map>

#include "gradus/core/cuda.h"

namespace gradus {
namespace {

std::map<std::string, double> peaks(int major, int minor, int sms, int clock_mhz) {
  cuda::DeviceProperties p;
  p.major = major;
  p.minor = minor;
  p.multiprocessors = sms;
  p.clock_khz = clock_mhz * 1000;
  std::map<std::string, double> out;
  for (const auto& [dtype, flops] : cuda::peak_flops(p)) out[dtype] = flops / 1e12;
  return out;
}

TEST(GpuPeaks, ReproduceThePublishedDatacenterFigures) {
  // A100 SXM4: 108 SMs at 1410 MHz: FP64 TC 19.5, FP32 19.5, TF32 156, BF16/FP16 312 TFLOP/s.
  auto a100 = peaks(8, 0, 108, 1410);
  EXPECT_NEAR(a100["fp64"], 19.5, 0.2);
  EXPECT_NEAR(a100["fp32"], 19.5, 0.2);
  EXPECT_NEAR(a100["tf32"], 156, 1.5);
  EXPECT_NEAR(a100["bf16"], 312, 3);
  EXPECT_NEAR(a100["fp16"], 312, 3);
  // H100 SXM5: 132 SMs; the tensor-core figures are quoted at 1830 MHz: TF32 494.7, BF16 989.4.
  auto h100 = peaks(9, 0, 132, 1830);
  EXPECT_NEAR(h100["tf32"], 494.7, 5);
  EXPECT_NEAR(h100["bf16"], 989.4, 10);
  // V100 SXM2: 80 SMs at 1530 MHz: FP16 tensor 125, FP32 15.7, FP64 7.8; no TF32.
  auto v100 = peaks(7, 0, 80, 1530);
  EXPECT_NEAR(v100["fp16"], 125, 1.5);
  EXPECT_NEAR(v100["fp32"], 15.7, 0.2);
  EXPECT_NEAR(v100["fp64"], 7.8, 0.1);
  EXPECT_EQ(v100.count("tf32"), 0u);
}

TEST(GpuPeaks, UnknownArchitecturesGiveNothing) {
  EXPECT_TRUE(peaks(6, 1, 28, 1500).empty());
}

}  // namespace
}  // namespace gradus
