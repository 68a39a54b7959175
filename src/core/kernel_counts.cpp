#include "gradus/core/kernel_counts.h"

#include <mutex>

namespace gradus {
namespace {
std::mutex g_mutex;
std::map<std::string, int64_t>& counts() {
  static std::map<std::string, int64_t> c;
  return c;
}
}  // namespace

namespace detail {
std::atomic<bool> g_count_kernels{false};

void count_kernel_slow(const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++counts()[name];
}
}  // namespace detail

void set_kernel_counting(bool on) {
  detail::g_count_kernels.store(on, std::memory_order_relaxed);
}

std::map<std::string, int64_t> kernel_counts() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return counts();
}

void reset_kernel_counts() {
  std::lock_guard<std::mutex> lock(g_mutex);
  counts().clear();
}

}  // namespace gradus
