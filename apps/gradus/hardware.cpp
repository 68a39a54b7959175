#include "hardware.h"

#include <cblas.h>
#include <omp.h>

#include <fstream>
#include <string>

namespace gradus::cli {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

nlohmann::ordered_json peaks(const cuda::DeviceProperties& p) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [dtype, flops] : cuda::peak_flops(p)) out[dtype] = flops;
  return out;
}

std::string simd_level() {
  if (__builtin_cpu_supports("avx512f")) return "AVX-512";
  if (__builtin_cpu_supports("avx2")) return "AVX2";
  if (__builtin_cpu_supports("avx")) return "AVX";
  if (__builtin_cpu_supports("sse4.2")) return "SSE4.2";
  return "baseline x86-64";
}

}  // namespace

nlohmann::ordered_json hardware_report() {
  nlohmann::ordered_json cpu = {
      {"model", cpu_model()}, {"processors", omp_get_num_procs()}, {"simd", simd_level()}};
  const char* config = openblas_get_config();
  const char* core = openblas_get_corename();
  cpu["openblas"] = {{"config", config ? config : "unknown"},
                     {"core", core ? core : "unknown"},
                     {"threads", openblas_get_num_threads()}};
  nlohmann::ordered_json gpus = nlohmann::ordered_json::array();
  for (int i = 0; i < cuda::device_count(); ++i) {
    const cuda::DeviceProperties p = cuda::device_properties(i);
    gpus.push_back({{"index", i},
                    {"name", p.name},
                    {"compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor)},
                    {"multiprocessors", p.multiprocessors},
                    {"memory_bytes", p.total_memory},
                    {"l2_cache_bytes", p.l2_cache_bytes},
                    {"clock_khz", p.clock_khz},
                    {"memory_clock_khz", p.memory_clock_khz},
                    {"memory_bus_width_bits", p.memory_bus_width},
                    {"memory_bandwidth_gbps", p.memory_bandwidth_gbps},
                    {"peak_flops", peaks(p)},
                    {"pci_bus_id", p.pci_bus_id},
                    {"driver_version", p.driver_version},
                    {"runtime_version", p.runtime_version}});
  }
  return {{"cpu", cpu}, {"gpus", gpus}};
}

}  // namespace gradus::cli
