// gradus bench --roofline: the two ceilings of a roofline plot, measured and set against the
// device's theoretical peaks: GEMM FLOP/s per dtype (compute-bound at the default sizes) and the
// bandwidth of a large tensor copy (memory-bound). One JSON line on stdout, a table on stderr.
//
// GPU peaks come from gradus/core/cuda.h (peak_flops per dtype, memory_bandwidth_gbps). The CPU's
// are computed from threads x maximum clock x FLOPs per cycle of its widest FMA (2 FMA pipes per
// core for AVX2 on Haswell+/Zen 2+, 128-bit ones on Zen 1); when a factor cannot be known
// (AVX-512 SKUs have 1 or 2 FMA units; in a VM there is no cpufreq, so no maximum clock) the peak
// is null and "peak_note" says why (with the peak at /proc/cpuinfo's nominal clock, in
// parentheses in the table, when only the clock is missing).
// DRAM bandwidth is not readable on the CPU (channels and DIMM speed are not exposed to a
// process), so the copy's peak is null there.
#include <cpuid.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "commands.h"
#include "gradus/core/cpu_kernels.h"
#include "gradus/core/cuda.h"
#include "gradus/gradus.h"
#include "timing.h"

namespace gradus::cli {

namespace {

constexpr int kTimed = 3;  // timed calls per measurement (after one warm-up call)

void sync(const Tensor& t) {
  (void)t.reshape({-1}).slice(0, 0, 1).item();
}

struct Peak {
  std::optional<double> value;  // FLOP/s or bytes/s
  std::string basis;            // how it was computed, or why it is null
  // CPU without a maximum clock: the peak at /proc/cpuinfo's clock, which boost exceeds.
  std::optional<double> at_nominal_clock = std::nullopt;
};

// cpufreq's maximum (the boost clock: the true ceiling), when the kernel exposes it.
std::optional<double> cpu_max_clock_mhz() {
  std::ifstream max("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (max >> khz && khz > 0) return khz / 1e3;
  return std::nullopt;
}

// The first "cpu MHz" of /proc/cpuinfo: the current clock, or in a VM the nominal one.
std::optional<double> cpuinfo_clock_mhz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("cpu MHz")) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    try {
      const double mhz = std::stod(line.substr(colon + 1));
      if (mhz > 0) return mhz;
    } catch (const std::exception&) {
    }
    break;
  }
  return std::nullopt;
}

// The CPU family of an AMD processor (0x17 Zen 1/2, 0x19 Zen 3/4), 0 for other vendors.
unsigned amd_family() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return 0;
  // "AuthenticAMD" in ebx, edx, ecx.
  if (b != 0x68747541 || d != 0x69746e65 || c != 0x444d4163) return 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return 0;
  const unsigned base = (a >> 8) & 0xf;
  return base == 0xf ? base + ((a >> 20) & 0xff) : base;
}

// f32 FLOPs per cycle per core of the widest FMA, or why it is unknown.
std::pair<std::optional<double>, std::string> cpu_f32_flops_per_cycle() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    if (amd_family() == 0x19) return {32.0, "Zen 4 AVX-512 (two 256-bit FMA pipes)"};
    return {std::nullopt,
            "AVX-512 cores have 1 or 2 FMA units depending on the SKU, which cpuid does not say"};
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    if (__builtin_cpu_is("znver1")) return {16.0, "Zen 1 AVX2 (two 128-bit FMA pipes)"};
    return {32.0, "AVX2 + FMA (two 256-bit FMA pipes: 2 x 8 lanes x 2)"};
  }
  return {std::nullopt, "no FMA: the peak of older SIMD levels is not computed"};
}

// FLOPs per cycle per core for dtype, or why it is unknown. bf16 counts only where gradus
// multiplies it natively (gradus info's "16-bit GEMMs"): VDPBF16PS does two bf16 products per
// float32 lane, twice an FMA's FLOPs; AMX's tile multiply does 1024 bf16 FLOPs a cycle.
std::pair<std::optional<double>, std::string> cpu_flops_per_cycle(DType dtype) {
  const CpuKernelsInfo kernels = cpu_kernels_info();
  if (dtype == DType::f16 || (dtype == DType::bf16 && !kernels.native_bf16_gemm)) {
    return {std::nullopt, "no native " + std::string(dtype_name(dtype)) + " GEMM on this CPU (" +
                              kernels.half_gemm + "): compare with float32's peak"};
  }
  if (dtype == DType::bf16 && kernels.half_gemm.find("AMX") != std::string::npos) {
    return {1024.0, "AMX-BF16 tile multiply, 1024 FLOP/cycle"};
  }
  const auto [per_cycle, simd] = cpu_f32_flops_per_cycle();
  if (!per_cycle) return {std::nullopt, simd};
  if (dtype == DType::f64) return {0.5 * *per_cycle, simd + ", half the f32 lanes"};
  if (dtype == DType::bf16) {
    return {2.0 * *per_cycle, simd + ", VDPBF16PS: two bf16 products per f32 lane"};
  }
  return {*per_cycle, simd};
}

Peak cpu_peak(DType dtype, int threads) {
  const auto [per_cycle, simd] = cpu_flops_per_cycle(dtype);
  if (!per_cycle) return {std::nullopt, simd};
  const double flops = *per_cycle;
  char buf[640];
  if (const std::optional<double> mhz = cpu_max_clock_mhz()) {
    std::snprintf(buf, sizeof(buf),
                  "%d threads x %.0f MHz (cpufreq maximum) x %.0f FLOP/cycle (%s)", threads, *mhz,
                  flops, simd.c_str());
    return {threads * *mhz * 1e6 * flops, buf};
  }
  // Without cpufreq (a VM) the maximum clock is unknown: /proc/cpuinfo shows the nominal or
  // current one, which boost exceeds, so a "peak" from it is not a ceiling.
  const std::optional<double> mhz = cpuinfo_clock_mhz();
  if (!mhz) return {std::nullopt, "no CPU clock in cpufreq or /proc/cpuinfo"};
  std::snprintf(buf, sizeof(buf),
                "the maximum (boost) clock is unknown: no cpufreq (a VM?), and /proc/cpuinfo's "
                "%.0f MHz is the nominal or current clock, which boost exceeds; "
                "peak_at_nominal_clock_gflops is %d threads x %.0f MHz x %.0f FLOP/cycle (%s)",
                *mhz, threads, *mhz, flops, simd.c_str());
  return {std::nullopt, buf, threads * *mhz * 1e6 * flops};
}

Peak gpu_peak(DType dtype, const cuda::DeviceProperties& p) {
  std::string key = dtype == DType::f64    ? "fp64"
                    : dtype == DType::f32  ? (cuda::allow_tf32() ? "tf32" : "fp32")
                    : dtype == DType::bf16 ? "bf16"
                                           : "fp16";
  for (const auto& [name, flops] : cuda::peak_flops(p)) {
    if (name == key) {
      return {flops, key + " dense peak of " + p.name + " (gradus/core/cuda.h peak_flops)"};
    }
  }
  return {std::nullopt, "compute capability " + std::to_string(p.major) + "." +
                            std::to_string(p.minor) + " is not in gradus's peak table"};
}

// Median and best seconds of kTimed calls after one warm-up.
template <typename F>
std::pair<double, double> time_it(F&& f) {
  std::vector<double> ms = time_steps(1, kTimed, 1, f);
  return {median(ms) / 1e3, *std::min_element(ms.begin(), ms.end()) / 1e3};
}

}  // namespace

int bench_roofline(const BenchOptions& o, Device device) {
  const int64_t n = o.gemm > 0 ? o.gemm : device.is_cuda() ? 8192 : 2048;
  const int threads = get_num_threads();
  std::optional<cuda::DeviceProperties> props;
  if (device.is_cuda()) props = cuda::device_properties(device.index());
  std::vector<DType> dtypes = {DType::f32, DType::f64, DType::bf16, DType::f16};
  if (props && props->major < 8) {
    dtypes.erase(std::find(dtypes.begin(), dtypes.end(), DType::bf16));  // no bf16 before Ampere
  }
  NoGradGuard no_grad;
  nlohmann::ordered_json gemms = nlohmann::ordered_json::array();
  std::fprintf(stderr, "%-10s %6s %12s %12s %12s %9s\n", "gemm", "n", "GFLOP/s", "best", "peak",
               "fraction");
  for (const DType dtype : dtypes) {
    const Tensor a = randn({n, n}, {DType::f32, device}).to(dtype);
    const Tensor b = randn({n, n}, {DType::f32, device}).to(dtype);
    const auto [median_s, best_s] = time_it([&] { sync(matmul(a, b)); });
    const double flop = 2.0 * static_cast<double>(n) * static_cast<double>(n) * n;
    const Peak peak = props ? gpu_peak(dtype, *props) : cpu_peak(dtype, threads);
    const double flops = flop / median_s, best = flop / best_s;
    nlohmann::ordered_json row = {{"dtype", dtype_name(dtype)}, {"n", n},
                                  {"gflops", flops / 1e9},      {"gflops_best", best / 1e9},
                                  {"peak_gflops", nullptr},     {"fraction_of_peak", nullptr}};
    char fraction[32] = "-";
    if (peak.value) {
      row["peak_gflops"] = *peak.value / 1e9;
      row["fraction_of_peak"] = flops / *peak.value;
      row["peak_basis"] = peak.basis;
      std::snprintf(fraction, sizeof(fraction), "%.2f", flops / *peak.value);
    } else {
      row["peak_note"] = peak.basis;
      if (peak.at_nominal_clock) {
        row["peak_at_nominal_clock_gflops"] = *peak.at_nominal_clock / 1e9;
        std::snprintf(fraction, sizeof(fraction), "(%.2f)", flops / *peak.at_nominal_clock);
      }
    }
    char peak_text[32] = "null";
    if (peak.value) {
      std::snprintf(peak_text, sizeof(peak_text), "%.0f", *peak.value / 1e9);
    } else if (peak.at_nominal_clock) {
      std::snprintf(peak_text, sizeof(peak_text), "(%.0f)", *peak.at_nominal_clock / 1e9);
    }
    std::fprintf(stderr, "%-10s %6lld %12.1f %12.1f %12s %9s\n", dtype_name(dtype),
                 static_cast<long long>(n), flops / 1e9, best / 1e9, peak_text, fraction);
    gemms.push_back(row);
  }

  // A copy reads and writes every byte: 2 x size per copy. 256 MiB on the CPU (well past the
  // caches), 2 GiB on a GPU.
  const int64_t copy_bytes = device.is_cuda() ? (int64_t{2} << 30) : (int64_t{256} << 20);
  const Tensor src = randn({copy_bytes / 4}, {DType::f32, device});
  Tensor dst = zeros({copy_bytes / 4}, {DType::f32, device});
  const auto [copy_median_s, copy_best_s] = time_it([&] {
    dst.copy_(src);
    sync(dst);
  });
  const double moved = 2.0 * static_cast<double>(copy_bytes);
  const double gbps = moved / copy_median_s / 1e9;
  nlohmann::ordered_json copy = {{"bytes", copy_bytes},
                                 {"gb_per_s", gbps},
                                 {"gb_per_s_best", moved / copy_best_s / 1e9},
                                 {"peak_gb_per_s", nullptr},
                                 {"fraction_of_peak", nullptr}};
  if (props && props->memory_bandwidth_gbps > 0) {
    copy["peak_gb_per_s"] = props->memory_bandwidth_gbps;
    copy["fraction_of_peak"] = gbps / props->memory_bandwidth_gbps;
    copy["peak_basis"] = "2 x memory clock x bus width (gradus/core/cuda.h)";
  } else {
    copy["peak_note"] = props ? "the driver reports no memory clock"
                              : "the CPU's DRAM bandwidth (channels, DIMM speed) is not readable "
                                "from a process";
  }
  char copy_peak[32] = "null", copy_fraction[32] = "-";
  if (!copy["peak_gb_per_s"].is_null()) {
    std::snprintf(copy_peak, sizeof(copy_peak), "%.0f", props->memory_bandwidth_gbps);
    std::snprintf(copy_fraction, sizeof(copy_fraction), "%.2f",
                  copy["fraction_of_peak"].get<double>());
  }
  std::fprintf(stderr, "%-10s %5lldM %12.1f %12.1f %12s %9s   (GB/s, read + write)\n", "copy",
               static_cast<long long>(copy_bytes >> 20), gbps, moved / copy_best_s / 1e9, copy_peak,
               copy_fraction);

  const nlohmann::ordered_json out = {
      {"benchmark", "roofline"}, {"device", device.str()},
      {"threads", threads},      {"processors", omp_get_num_procs()},
      {"gemm", gemms},           {"copy", copy},
      {"timed_calls", kTimed}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace gradus::cli
