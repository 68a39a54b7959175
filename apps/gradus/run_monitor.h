// The device monitor of a `gradus train` or `gradus bench` run (gradus::monitor::DeviceMonitor):
// how it is made for a device, and what the metrics and bench JSON say of its readings.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "gradus/core/device.h"
#include "gradus/monitor/monitor.h"

namespace gradus::cli {

// Watches the host (process CPU and RSS, RAPL when readable) and, when `device` is a GPU, the
// GPUs through NVML: the device's own when CUDA_VISIBLE_DEVICES does not renumber them (CUDA and
// NVML then count alike), else every GPU NVML sees. Never throws for a missing driver.
std::unique_ptr<monitor::DeviceMonitor> make_run_monitor(const Device& device,
                                                         std::chrono::milliseconds interval);

// A metrics line's "monitor" object: Totals::to_json()'s keys (those measured) plus "energy_j",
// null when nothing measures energy (no NVML energy or power, no readable RAPL).
nlohmann::ordered_json monitor_json(const monitor::Totals& window);

// Adds energy_j, energy_per_step_j, energy_per_sample_j and energy_source to a bench result, all
// null with an "energy_note" saying why when the window measured no energy.
void add_energy(nlohmann::ordered_json& out, const monitor::Totals& window,
                const monitor::DeviceMonitor& monitor, int64_t steps, int64_t samples_per_step);

}  // namespace gradus::cli
