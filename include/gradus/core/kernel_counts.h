// Counts of the backward kernels that freezing and checkpointing are meant to skip or repeat,
// for tests and tools: "linear.input_grad", "linear.weight_grad", "conv2d.input_grad",
// "conv2d.weight_grad"; and how split's backward joined its pieces' gradients: "split.cat_grad"
// (a copy) or "split.joined_grad" (they already lay side by side in one buffer, as the attention
// kernel writes a projection's q, k, v gradients). Off by default; when off, counting costs one
// relaxed atomic load.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace gradus {

void set_kernel_counting(bool on);
std::map<std::string, int64_t> kernel_counts();  // name -> launches since the last reset
void reset_kernel_counts();

// Counts while alive (and resets at construction).
class KernelCountScope {
 public:
  KernelCountScope() {
    reset_kernel_counts();
    set_kernel_counting(true);
  }
  ~KernelCountScope() { set_kernel_counting(false); }
  KernelCountScope(const KernelCountScope&) = delete;
  KernelCountScope& operator=(const KernelCountScope&) = delete;
  int64_t operator[](const std::string& name) const {
    const auto counts = kernel_counts();
    const auto it = counts.find(name);
    return it == counts.end() ? 0 : it->second;
  }
};

namespace detail {
extern std::atomic<bool> g_count_kernels;
void count_kernel_slow(const char* name);
inline void count_kernel(const char* name) {
  if (g_count_kernels.load(std::memory_order_relaxed)) count_kernel_slow(name);
}
}  // namespace detail

}  // namespace gradus
