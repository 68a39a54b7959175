// Helpers shared by the profiler's summary (profiler.cpp) and trace (profiler_trace.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "gradus/core/profiling.h"

namespace gradus::monitor::detail {

// Start ascending, then longer first: a parent comes before the children it contains, which is
// the order the nesting below and trace viewers expect.
void sort_for_nesting(std::vector<profiling::Event>& events);

// For events sorted by sort_for_nesting: the time of each event's direct children (scopes nested
// in it on the same thread), from which self time = duration - children.
std::vector<int64_t> child_time_ns(const std::vector<profiling::Event>& events);

// The event's device interval in steady_clock ns (from its two CUDA events), when both resolved.
std::optional<std::pair<int64_t, int64_t>> device_span(const profiling::SessionResult& session,
                                                       const profiling::Event& e);

}  // namespace gradus::monitor::detail
