// gradus info: what this binary is and what it can use.
#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "gradus/core/cpu_kernels.h"
#include "gradus/core/cuda.h"
#include "gradus/core/cuda_libraries.h"
#include "gradus/core/device.h"
#include "gradus/core/error.h"
#include "gradus/core/host_memory.h"
#include "gradus/core/threads.h"
#include "gradus/dist/process_group.h"
#include "hardware.h"

namespace gradus::cli {

void apply_threads(int threads) {
  if (threads <= 0) return;
  set_num_threads(threads);
  // OpenBLAS caps its threads at the MAX_THREADS it was built with (64 in Debian's): say so
  // rather than let a requested 1000 silently become 64 in every matrix product.
  const int blas = openblas_get_num_threads();
  if (blas < threads) {
    std::fprintf(stderr,
                 "gradus: warning: --threads %d: OpenBLAS was built for at most %d threads, so "
                 "matrix products use %d (the other ops use %d)\n",
                 threads, blas, blas, threads);
  }
}

std::optional<double> number_with_unit(
    const std::string& text, std::initializer_list<std::pair<std::string_view, double>> units) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const std::string_view unit = std::string_view(text).substr(pos);
  for (const auto& [suffix, multiplier] : units) {
    if (unit == suffix && std::isfinite(v * multiplier)) return v * multiplier;
  }
  return std::nullopt;
}

size_t parse_byte_size(const std::string& text) {
  constexpr double kKi = 1024.0;
  const std::optional<double> bytes = number_with_unit(text, {{"", 1},
                                                              {"B", 1},
                                                              {"K", kKi},
                                                              {"KiB", kKi},
                                                              {"M", kKi * kKi},
                                                              {"MiB", kKi * kKi},
                                                              {"G", kKi * kKi * kKi},
                                                              {"GiB", kKi * kKi * kKi},
                                                              {"KB", 1e3},
                                                              {"MB", 1e6},
                                                              {"GB", 1e9}});
  GRADUS_CHECK(bytes && *bytes >= 1 && *bytes < 1e18, ValueError, "'", text,
               "' is not a size: expected a positive number of bytes with an optional unit "
               "(KiB, MiB, GiB, KB, MB, GB), e.g. 512MiB");
  return static_cast<size_t>(*bytes);
}

std::optional<DType> amp_option(const std::string& value) {
  if (value == "off") return std::nullopt;
  return dtype_from_name(value);
}

std::optional<DType> communication_dtype(const std::string& option, const std::string& value,
                                         const std::string& dist) {
  if (value.empty()) return std::nullopt;
  const bool gather = option == "--gather-dtype";
  GRADUS_CHECK(dist == "fsdp" || (!gather && dist == "zero2"), ValueError, option,
               gather ? " sets the dtype --dist fsdp gathers parameters in"
                      : " sets the dtype --dist zero2|fsdp reduce-scatters gradients in",
               "; this run has ", dist.empty() ? "no --dist" : "--dist " + dist);
  return dtype_from_name(value);
}

Device resolve_device(const std::string& name) {
  const Device d = Device::parse(name);
  if (d.is_cuda()) {
    const int count = cuda_device_count();
    GRADUS_CHECK(d.index() < count, DeviceError, "device '", name, "' was requested but ",
                 count == 0 ? (cuda::backend_loaded()
                                   ? std::string("no CUDA device is visible")
                                   : "the CUDA backend is unavailable: " + cuda::backend_status())
                            : std::to_string(count) + " CUDA device(s) are visible",
                 "; use --device cpu or --device auto");
  }
  return d;
}

int run_info(bool json) {
  if (json) {
    nlohmann::ordered_json out = {{"version", GRADUS_VERSION},
                                  {"build_type", GRADUS_BUILD_TYPE},
                                  {"compiler", GRADUS_CXX_COMPILER},
                                  {"cuda_backend", cuda::backend_loaded()},
                                  {"cuda_backend_status", cuda::backend_status()},
                                  {"threads", get_num_threads()}};
    const CpuKernelsInfo kernels = cpu_kernels_info();
    out["cpu_kernels"] = {{"isa", kernels.isa},
                          {"library", kernels.path},
                          {"half_gemm", kernels.half_gemm},
                          {"native_bf16_gemm", kernels.native_bf16_gemm},
                          {"f32_gemm", kernels.f32_gemm},
                          {"onednn_f32_gemm", kernels.onednn_f32_gemm}};
    out.update(hardware_report());
    out["mpi"] = dist::mpi_version();
    out["cudnn"] = cuda::cudnn_version();
    out["nccl"] = dist::nccl_version();
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("gradus %s\n", GRADUS_VERSION);
  std::printf("build: %s, %s\n", GRADUS_BUILD_TYPE, GRADUS_CXX_COMPILER);
  std::printf("CUDA backend: %s\n", cuda::backend_status().c_str());
  const CpuKernelsInfo kernels = cpu_kernels_info();
  std::printf("CPU kernels: %s%s%s\n", kernels.isa.c_str(), kernels.path.empty() ? "" : ", ",
              kernels.path.c_str());
  std::printf("16-bit GEMMs: %s\n", kernels.half_gemm.c_str());
  std::printf("32-bit GEMMs: %s\n", kernels.f32_gemm.c_str());
  std::printf("threads: %d (OpenMP, %d processors)\n", get_num_threads(), omp_get_num_procs());
  std::printf("host memory cache: up to %zu MiB of freed blocks (GRADUS_HOST_CACHE_MB)\n",
              host::cache_stats().limit_bytes >> 20);
  const char* config = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
  const char* core = openblas_get_corename();  // the kernel set chosen at run time
  std::printf("BLAS: %s, core %s, %d threads\n", config ? config : "OpenBLAS (unknown)",
              core ? core : "unknown", openblas_get_num_threads());
  // OpenBLAS's DYNAMIC_ARCH picks kernels from the CPUID model; a CPU model it does not know (a
  // VM reporting a generic "Intel Xeon Processor") falls back to the SSE3 'Prescott' kernels,
  // about 4x slower for SGEMM on an AVX-512 machine. Say so, with the fix.
  const std::string core_name = core ? core : "";
  const bool old_core = core_name == "Prescott" || core_name == "Core2" || core_name == "Penryn" ||
                        core_name == "Nehalem" || core_name == "Dunnington";
  if (old_core && (__builtin_cpu_supports("avx2") || __builtin_cpu_supports("avx512f"))) {
    std::printf(
        "note: OpenBLAS chose its %s (SSE) kernels although this CPU has %s; set "
        "OPENBLAS_CORETYPE=%s before starting gradus for much faster matrix products\n",
        core_name.c_str(), __builtin_cpu_supports("avx512f") ? "AVX-512" : "AVX2",
        __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
  }
  const nlohmann::ordered_json hw = hardware_report();
  std::printf("cpu: %s, %d processors, %s\n", hw["cpu"]["model"].get<std::string>().c_str(),
              hw["cpu"]["processors"].get<int>(), hw["cpu"]["simd"].get<std::string>().c_str());
  for (const auto& g : hw["gpus"]) {
    std::printf(
        "cuda:%d: %s, compute capability %s, %d SMs, %.1f GiB, L2 %.0f MiB, %.0f GB/s "
        "peak memory bandwidth (%d-bit bus)\n",
        g["index"].get<int>(), g["name"].get<std::string>().c_str(),
        g["compute_capability"].get<std::string>().c_str(), g["multiprocessors"].get<int>(),
        g["memory_bytes"].get<double>() / (1u << 30),
        g["l2_cache_bytes"].get<double>() / (1u << 20), g["memory_bandwidth_gbps"].get<double>(),
        g["memory_bus_width_bits"].get<int>());
    std::string peaks;
    for (const auto& [dtype, flops] : g["peak_flops"].items()) {
      peaks += (peaks.empty() ? "" : ", ") + dtype + " " +
               std::to_string(static_cast<int>(flops.get<double>() / 1e12 + 0.5)) + " TFLOP/s";
    }
    std::printf("  dense peak: %s\n",
                peaks.empty() ? "(architecture not in the table)" : peaks.c_str());
  }
  const int cuda = cuda_device_count();
  std::printf("devices: cpu");
  for (int i = 0; i < cuda; ++i) std::printf(", cuda:%d", i);
  std::printf(" (%d CUDA device%s)\n", cuda, cuda == 1 ? "" : "s");
  std::printf("default device: %s\n", Device::best().str().c_str());
  // The distributed engines (gradus train/bench --dist under mpirun or srun).
  std::printf("MPI: %s\n", dist::mpi_version().c_str());
  std::printf("cuDNN: %s\n", cuda::cudnn_version().c_str());
  std::printf("NCCL: %s\n", dist::nccl_version().c_str());
  return 0;
}

}  // namespace gradus::cli
