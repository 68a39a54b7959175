#include "run_monitor.h"

#include <algorithm>
#include <cstdlib>

#include "gradus/core/error.h"

namespace gradus::cli {

nlohmann::ordered_json monitor_json(const monitor::Totals& window) {
  nlohmann::ordered_json out = nlohmann::ordered_json::parse(window.to_json());
  const std::optional<double> energy = window.measured_energy_j();
  out["energy_j"] = energy ? nlohmann::ordered_json(*energy) : nlohmann::ordered_json(nullptr);
  return out;
}

void add_energy(nlohmann::ordered_json& out, const monitor::Totals& window,
                const monitor::DeviceMonitor& monitor, int64_t steps, int64_t samples_per_step) {
  const std::optional<double> energy = window.measured_energy_j();
  if (!energy || steps <= 0) {
    out["energy_j"] = nullptr;
    out["energy_per_step_j"] = nullptr;
    out["energy_per_sample_j"] = nullptr;
    out["energy_source"] = nullptr;
    out["energy_note"] = monitor.gpus_available() ? "no energy counter or power reading on the GPU"
                                                  : monitor.status();
    return;
  }
  const double per_step = *energy / static_cast<double>(steps);
  out["energy_j"] = *energy;
  out["energy_per_step_j"] = per_step;
  out["energy_per_sample_j"] =
      per_step / static_cast<double>(std::max<int64_t>(samples_per_step, 1));
  out["energy_source"] = window.energy_source();
}

}  // namespace gradus::cli
