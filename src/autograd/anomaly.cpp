// Anomaly mode: NaN/Inf detection in forward outputs and backward gradients, with the call stack
// of the op that produced them.
#include <cxxabi.h>
#include <execinfo.h>

#include <atomic>
#include <cstdlib>
#include <memory>

#include "autograd/node.h"
#include "gradus/autograd.h"
#include "gradus/ops.h"

namespace gradus {
namespace {
std::atomic<bool> g_anomaly{false};
}

void set_detect_anomaly(bool enabled) {
  g_anomaly.store(enabled);
}
bool is_anomaly_enabled() {
  return g_anomaly.load(std::memory_order_relaxed);
}

namespace autograd {

std::string capture_call_stack() {
  void* frames[32];
  const int n = backtrace(frames, 32);
  std::unique_ptr<char*, decltype(&std::free)> symbols(backtrace_symbols(frames, n), &std::free);
  std::string out;
  // Skip this function and the recording machinery; keep the frames that lead to the op.
  for (int i = 2; i < n && symbols; ++i) {
    std::string line = symbols.get()[i];
    // "binary(mangled+0x1f) [0x...]": demangle the part between '(' and '+'.
    const size_t open = line.find('('), plus = line.find('+', open);
    if (open != std::string::npos && plus != std::string::npos && plus > open + 1) {
      const std::string mangled = line.substr(open + 1, plus - open - 1);
      int status = 0;
      std::unique_ptr<char, decltype(&std::free)> demangled(
          abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), &std::free);
      if (status == 0 && demangled) line = demangled.get();
    }
    if (line.find("gradus::autograd::record") != std::string::npos) continue;
    out += "  " + line + "\n";
  }
  return out;
}

void check_finite(const TensorList& tensors, const std::string& what, const std::string& trace) {
  NoGradGuard no_grad;
  const bool previous = is_anomaly_enabled();
  set_detect_anomaly(false);  // the check itself runs ops; don't recurse
  struct Restore {
    bool value;
    ~Restore() { set_detect_anomaly(value); }
  } restore{previous};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) continue;
    const bool has_nan = any(isnan(t)).item() != 0;
    const bool has_inf = !has_nan && any(isinf(t)).item() != 0;
    if (has_nan || has_inf) {
      throw AutogradError(detail::str_cat(
          "anomaly detected: ", what, " produced ", has_nan ? "NaN" : "Inf", " in output ", i,
          " (shape ", shape_str(t.sizes()), ", ", dtype_name(t.dtype()), ")",
          trace.empty() ? std::string() : "\nthe op was created at:\n" + trace));
    }
  }
}

}  // namespace autograd
}  // namespace gradus
