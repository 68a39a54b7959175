#include "gradus/monitor/nvml.h"

#include <dlfcn.h>

#include <cstdlib>

#include "monitor/nvml_abi.h"

namespace gradus::monitor {

// Every function is looked up on its own: a missing one (an older driver, a fake) empties the
// fields it serves and nothing else.
struct Nvml::Api {
  nvmlInit_v2_fn init = nullptr;
  nvmlShutdown_fn shutdown = nullptr;
  nvmlErrorString_fn error_string = nullptr;
  nvmlSystemGetDriverVersion_fn driver_version = nullptr;
  nvmlDeviceGetCount_v2_fn count = nullptr;
  nvmlDeviceGetHandleByIndex_v2_fn handle = nullptr;
  nvmlDeviceGetName_fn name = nullptr;
  nvmlDeviceGetUtilizationRates_fn utilization = nullptr;
  nvmlDeviceGetMemoryInfo_fn memory = nullptr;
  nvmlDeviceGetPowerUsage_fn power = nullptr;
  nvmlDeviceGetEnforcedPowerLimit_fn power_limit = nullptr;
  nvmlDeviceGetTemperature_fn temperature = nullptr;
  nvmlDeviceGetClockInfo_fn clock = nullptr;
  nvmlDeviceGetCurrentClocksEventReasons_fn clock_events = nullptr;
  nvmlDeviceGetPcieThroughput_fn pcie = nullptr;
  nvmlDeviceGetTotalEnergyConsumption_fn energy = nullptr;

  std::string error(nvmlReturn_t rc) const {
    const char* text = error_string ? error_string(rc) : nullptr;
    return text ? text : "NVML error " + std::to_string(rc);
  }
};

namespace {

template <typename Fn>
void bind(void* handle, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
}

nvmlDevice_t device(void* d) {
  return static_cast<nvmlDevice_t>(d);
}

}  // namespace

Nvml::Nvml(std::string library) : api_(std::make_unique<Api>()) {
  if (library.empty()) {
    const char* env = std::getenv("GRADUS_NVML_LIBRARY");
    library = env && *env ? env : "libnvidia-ml.so.1";
  }
  handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* why = dlerror();
    status_ = "NVML not available: " + std::string(why ? why : library + ": cannot load");
    return;
  }
  Api& a = *api_;
  bind(handle_, a.init, "nvmlInit_v2");
  bind(handle_, a.shutdown, "nvmlShutdown");
  bind(handle_, a.error_string, "nvmlErrorString");
  bind(handle_, a.driver_version, "nvmlSystemGetDriverVersion");
  bind(handle_, a.count, "nvmlDeviceGetCount_v2");
  bind(handle_, a.handle, "nvmlDeviceGetHandleByIndex_v2");
  bind(handle_, a.name, "nvmlDeviceGetName");
  bind(handle_, a.utilization, "nvmlDeviceGetUtilizationRates");
  bind(handle_, a.memory, "nvmlDeviceGetMemoryInfo");
  bind(handle_, a.power, "nvmlDeviceGetPowerUsage");
  bind(handle_, a.power_limit, "nvmlDeviceGetEnforcedPowerLimit");
  bind(handle_, a.temperature, "nvmlDeviceGetTemperature");
  bind(handle_, a.clock, "nvmlDeviceGetClockInfo");
  // Renamed in r535; the old name remains an alias, so either serves.
  bind(handle_, a.clock_events, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!a.clock_events) bind(handle_, a.clock_events, "nvmlDeviceGetCurrentClocksThrottleReasons");
  bind(handle_, a.pcie, "nvmlDeviceGetPcieThroughput");
  bind(handle_, a.energy, "nvmlDeviceGetTotalEnergyConsumption");
  if (!a.init || !a.count || !a.handle) {
    status_ = "NVML not available: " + library +
              " lacks nvmlInit_v2, nvmlDeviceGetCount_v2 or nvmlDeviceGetHandleByIndex_v2";
    return;
  }
  if (const nvmlReturn_t rc = a.init(); rc != NVML_SUCCESS) {
    status_ = "NVML not available: nvmlInit_v2 failed: " + a.error(rc);
    return;
  }
  initialised_ = true;
  unsigned int count = 0;
  if (const nvmlReturn_t rc = a.count(&count); rc != NVML_SUCCESS) {
    status_ = "NVML not available: nvmlDeviceGetCount_v2 failed: " + a.error(rc);
    return;
  }
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t d = nullptr;
    // A GPU NVML cannot open (no permission, fallen off the bus) is listed without readings.
    if (a.handle(i, &d) != NVML_SUCCESS) d = nullptr;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (!d || !a.name || a.name(d, name, sizeof(name)) != NVML_SUCCESS) name[0] = '\0';
    devices_.push_back(d);
    names_.emplace_back(name[0] ? name : "GPU " + std::to_string(i));
  }
  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (a.driver_version && a.driver_version(version, sizeof(version)) == NVML_SUCCESS) {
    driver_version_ = version;
  }
  available_ = true;
  status_ = "NVML" + (driver_version_.empty() ? "" : " " + driver_version_) + ", " +
            std::to_string(count) + " GPU" + (count == 1 ? "" : "s");
}

Nvml::~Nvml() {
  if (initialised_ && api_->shutdown) api_->shutdown();
  if (handle_) dlclose(handle_);
}

GpuSample Nvml::sample(int index) const {
  GpuSample s;
  s.index = index;
  if (index < 0 || index >= device_count()) return s;
  s.name = names_[index];
  const nvmlDevice_t d = device(devices_[index]);
  if (!d) return s;
  const Api& a = *api_;
  // Reads one unsigned value; the field stays empty on any error (NOT_SUPPORTED included).
  auto read = [](auto fn, auto&&... args) -> std::optional<unsigned long long> {
    if (!fn) return std::nullopt;
    unsigned int v = 0;
    if (fn(args..., &v) != NVML_SUCCESS) return std::nullopt;
    return v;
  };
  if (nvmlUtilization_t u{}; a.utilization && a.utilization(d, &u) == NVML_SUCCESS) {
    s.util_percent = u.gpu;
    s.memory_util_percent = u.memory;
  }
  if (nvmlMemory_t m{}; a.memory && a.memory(d, &m) == NVML_SUCCESS) {
    s.memory_used_bytes = m.used;
    s.memory_total_bytes = m.total;
  }
  if (auto mw = read(a.power, d)) s.power_w = static_cast<double>(*mw) / 1e3;
  if (auto mw = read(a.power_limit, d)) s.power_limit_w = static_cast<double>(*mw) / 1e3;
  if (auto c = read(a.temperature, d, NVML_TEMPERATURE_GPU)) s.temperature_c = *c;
  if (auto mhz = read(a.clock, d, NVML_CLOCK_SM)) s.sm_clock_mhz = *mhz;
  if (auto mhz = read(a.clock, d, NVML_CLOCK_MEM)) s.memory_clock_mhz = *mhz;
  if (unsigned long long r = 0; a.clock_events && a.clock_events(d, &r) == NVML_SUCCESS) {
    s.clock_event_reasons = r;
  }
  if (read_pcie_) {  // NVML's unit is KB/s (1024 bytes)
    if (auto kb = read(a.pcie, d, NVML_PCIE_UTIL_TX_BYTES)) s.pcie_tx_bytes_per_s = *kb * 1024.0;
    if (auto kb = read(a.pcie, d, NVML_PCIE_UTIL_RX_BYTES)) s.pcie_rx_bytes_per_s = *kb * 1024.0;
  }
  if (unsigned long long mj = 0; a.energy && a.energy(d, &mj) == NVML_SUCCESS) {
    s.energy_counter_j = static_cast<double>(mj) / 1e3;
  }
  return s;
}

std::string describe_clock_event_reasons(uint64_t reasons) {
  static constexpr struct {
    uint64_t bit;
    const char* name;
  } kNames[] = {{nvmlClocksThrottleReasonGpuIdle, "idle"},
                {nvmlClocksThrottleReasonApplicationsClocksSetting, "app-clocks"},
                {nvmlClocksThrottleReasonSwPowerCap, "power-cap"},
                {nvmlClocksThrottleReasonHwSlowdown, "hw-slowdown"},
                {nvmlClocksThrottleReasonSyncBoost, "sync-boost"},
                {nvmlClocksThrottleReasonSwThermalSlowdown, "sw-thermal"},
                {nvmlClocksThrottleReasonHwThermalSlowdown, "hw-thermal"},
                {nvmlClocksThrottleReasonHwPowerBrakeSlowdown, "power-brake"},
                {nvmlClocksThrottleReasonDisplayClockSetting, "display"}};
  std::string out;
  auto add = [&out](const char* name) {
    if (!out.empty()) out += '+';
    out += name;
  };
  uint64_t known = 0;
  for (const auto& [bit, name] : kNames) {
    if (reasons & bit) add(name);
    known |= bit;
  }
  if (reasons & ~known) add("other");
  return out.empty() ? "none" : out;
}

}  // namespace gradus::monitor
