// What the metrics lines and bench JSON of a `gradus train` or `gradus bench` run say of a device
// monitor's readings (the monitor itself: train::make_device_monitor).
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "gradus/core/device.h"
#include "gradus/monitor/monitor.h"

namespace gradus::cli {

// A metrics line's "monitor" object: Totals::to_json()'s keys (those measured) plus "energy_j",
// null when nothing measures energy (no NVML energy or power, no readable RAPL).
nlohmann::ordered_json monitor_json(const monitor::Totals& window);

// Adds energy_j, energy_per_step_j, energy_per_sample_j and energy_source to a bench result, all
// null with an "energy_note" saying why when the window measured no energy.
void add_energy(nlohmann::ordered_json& out, const monitor::Totals& window,
                const monitor::DeviceMonitor& monitor, int64_t steps, int64_t samples_per_step);

}  // namespace gradus::cli
