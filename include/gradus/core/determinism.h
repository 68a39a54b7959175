// Deterministic mode: a process-wide switch that forbids kernels whose results can differ from
// one run to the next (PyTorch's torch.use_deterministic_algorithms).
//
//   gradus::set_deterministic(true);        // or `gradus train --deterministic`
//   gradus::DeterministicGuard on;          // scoped
//
// What it means per backend (docs/reliability.md, "Determinism", has the measurements):
//  - CPU: every kernel is already deterministic run to run for a fixed thread count (no atomics;
//    parallel reductions merge fixed-size chunks in a fixed order). The switch changes nothing
//    on the CPU. Results can depend on the thread count (conv2d weight/bias gradients sum
//    per-thread partials), so bitwise reproduction also needs the same --threads.
//  - CUDA: kernels that accumulate with atomics use an ordered variant when the switch is on
//    (embedding / index_add_rows backward, max-pool backward) or refuse through
//    check_deterministic_allowed (float scatter_add); cuDNN convolutions use only algorithms it
//    reports as deterministic, untimed (docs/reliability.md, "Determinism").
#pragma once

namespace gradus {

// Turns deterministic mode on or off for the whole process (thread-safe; read with relaxed cost).
void set_deterministic(bool enabled);
bool is_deterministic();

// For kernels without a deterministic implementation: throws gradus::ValueError naming `op` when
// deterministic mode is on, e.g. "index_add (CUDA): this kernel accumulates with atomics and is
// not deterministic, but deterministic mode is on (gradus::set_deterministic(true) /
// --deterministic); ...". Does nothing when it is off.
void check_deterministic_allowed(const char* op);

// Sets deterministic mode for a scope and restores the previous setting on exit.
class DeterministicGuard {
 public:
  explicit DeterministicGuard(bool enabled = true) : previous_(is_deterministic()) {
    set_deterministic(enabled);
  }
  ~DeterministicGuard() { set_deterministic(previous_); }
  DeterministicGuard(const DeterministicGuard&) = delete;
  DeterministicGuard& operator=(const DeterministicGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace gradus
