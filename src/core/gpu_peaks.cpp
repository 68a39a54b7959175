// cuda::peak_flops: the per-SM rate table behind gradus info's peak FLOP/s.
#include "gradus/core/cuda.h"

namespace gradus::cuda {

namespace {

// Dense operations per clock per SM (an FMA counts 2), from NVIDIA's architecture whitepapers
// (datacenter parts): V100 (7.0), A100 (8.0), GA10x (8.6), AD10x (8.9), H100 (9.0), B200 (10.0).
// fp64 is the FP64 tensor-core rate where there is one (8.0, 9.0, 10.0); half is bf16 and fp16
// on tensor cores with float32 accumulation (consumer parts of 8.6/8.9 run that at half rate).
struct SmRates {
  int major, minor;
  double fp64, fp32, tf32, half;
};
constexpr SmRates kRates[] = {
    {7, 0, 64, 128, 0, 1024},  {8, 0, 128, 128, 1024, 2048}, {8, 6, 2, 256, 512, 1024},
    {8, 9, 2, 256, 512, 1024}, {9, 0, 256, 256, 2048, 4096}, {10, 0, 128, 256, 4096, 8192},
};

}  // namespace

std::vector<std::pair<std::string, double>> peak_flops(const DeviceProperties& p) {
  std::vector<std::pair<std::string, double>> out;
  for (const SmRates& r : kRates) {
    if (r.major != p.major || r.minor != p.minor) continue;
    const double per_clock = static_cast<double>(p.multiprocessors) * p.clock_khz * 1e3;
    out = {{"fp64", per_clock * r.fp64}, {"fp32", per_clock * r.fp32}};
    if (r.tf32 > 0) out.emplace_back("tf32", per_clock * r.tf32);
    out.emplace_back("bf16", per_clock * r.half);
    out.emplace_back("fp16", per_clock * r.half);
  }
  return out;
}

}  // namespace gradus::cuda
