// `gradus train --profile trace.json [--profile-steps A:B]`: the Trainer profiles training steps A
// to B, writes their Chrome trace and prints the summary table (train::StepProfiler).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gradus/train/profiling.h"

namespace CLI {
class App;
}

namespace gradus::cli {

struct TrainOptions;

// Adds --profile and --profile-steps to `gradus train`.
void add_profile_options(CLI::App& train, TrainOptions& o);

// Steps A to B (1-based, inclusive) of the run; "" gives the default, a few steps after warm-up.
struct StepRange {
  int64_t first = 0, last = 0;
};
StepRange parse_step_range(const std::string& text);

// The Trainer's profile for --profile FILE --profile-steps A:B, checked before training (the range,
// and that the trace can be written: a typo fails at once rather than after the steps it waited
// for). No trace on ranks other than the lead (`write` false), which still check the range.
train::ProfileOptions profile_options(const std::string& path, const std::string& steps,
                                      bool write);

}  // namespace gradus::cli
