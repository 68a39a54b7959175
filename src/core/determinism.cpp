// The deterministic-mode switch (see gradus/core/determinism.h).
#include "gradus/core/determinism.h"

#include <atomic>

#include "gradus/core/error.h"

namespace gradus {

namespace {
// Read by kernels on every launch: a relaxed atomic costs a plain load.
std::atomic<bool> g_deterministic{false};
}  // namespace

void set_deterministic(bool enabled) {
  g_deterministic.store(enabled, std::memory_order_relaxed);
}

bool is_deterministic() {
  return g_deterministic.load(std::memory_order_relaxed);
}

void check_deterministic_allowed(const char* op) {
  GRADUS_CHECK(!is_deterministic(), ValueError, op,
               ": this kernel accumulates in a nondeterministic order (atomics) and has no "
               "deterministic implementation, but deterministic mode is on "
               "(gradus::set_deterministic(true) / --deterministic); run it on the CPU, or turn "
               "deterministic mode off for this op with gradus::DeterministicGuard(false)");
}

}  // namespace gradus
