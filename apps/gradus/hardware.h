// gradus info's hardware report (hardware.cpp): the CPU and every GPU, with theoretical peaks.
#pragma once

#include <nlohmann/json.hpp>

#include "gradus/core/cuda.h"

namespace gradus::cli {

// {"cpu": {...}, "gpus": [...]}: model, cores, SIMD level, OpenBLAS; per GPU the properties,
// bandwidth and peaks.
nlohmann::ordered_json hardware_report();

}  // namespace gradus::cli
