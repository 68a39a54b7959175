// NVIDIA GPUs as NVML sees them (utilisation, memory, power, energy, clocks), read through
// libnvidia-ml loaded at run time: a gradus built on a machine without the driver still runs, and
// one built without CUDA still monitors GPUs. Nothing here throws when NVML is missing or a GPU
// does not support a reading: the library's absence is a status, a reading's is an empty optional.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gradus::monitor {

// One GPU at one moment. An empty field: this NVML lacks the function, or the GPU does not
// support it (NVML_ERROR_NOT_SUPPORTED), or the call failed.
struct GpuSample {
  int index = 0;  // NVML's index (PCI bus order; CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA agree)
  std::string name;
  std::optional<double> util_percent;         // time a kernel ran, over NVML's last period
  std::optional<double> memory_util_percent;  // time device memory was read or written
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<double> power_w;
  std::optional<double> power_limit_w;  // the enforced limit
  std::optional<double> temperature_c;
  std::optional<double> sm_clock_mhz;
  std::optional<double> memory_clock_mhz;
  std::optional<uint64_t> clock_event_reasons;  // NVML's throttle bitmask (see describe_...)
  std::optional<double> pcie_tx_bytes_per_s;
  std::optional<double> pcie_rx_bytes_per_s;
  // NVML's energy counter: joules since the driver was loaded (Volta and newer). Differences of
  // two readings are the energy used in between.
  std::optional<double> energy_counter_j;
};

// "idle", "power-cap", "hw-slowdown", ... joined by '+'; "none" for 0.
std::string describe_clock_event_reasons(uint64_t reasons);

class Nvml {
 public:
  // library: the file to dlopen; empty means $GRADUS_NVML_LIBRARY, else "libnvidia-ml.so.1"
  // (tests load a fake). Loading or nvmlInit failing leaves an unavailable Nvml with a status.
  explicit Nvml(std::string library = {});
  ~Nvml();  // nvmlShutdown, dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool available() const { return available_; }
  // "NVML 550.54.15, 2 GPUs", "NVML not available: libnvidia-ml.so.1: cannot open shared object
  // file: ...", "NVML not available: nvmlInit_v2 failed: Driver Not Loaded".
  const std::string& status() const { return status_; }
  const std::string& driver_version() const { return driver_version_; }
  int device_count() const { return static_cast<int>(devices_.size()); }
  // The readings of GPU `index` (0 <= index < device_count()). Thread-safe (NVML is).
  GpuSample sample(int index) const;
  // Whether PCIe throughput is read: each counter costs NVML a 20 ms measurement window.
  void set_read_pcie(bool on) { read_pcie_ = on; }

 private:
  struct Api;
  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;  // dlopen's
  bool available_ = false;
  bool initialised_ = false;
  bool read_pcie_ = true;
  std::string status_;
  std::string driver_version_;
  std::vector<void*> devices_;  // nvmlDevice_t
  std::vector<std::string> names_;
};

}  // namespace gradus::monitor
