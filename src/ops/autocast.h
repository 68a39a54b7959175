// Autocast's hook into the op layer (the public scope is gradus/amp/autocast.h). An op listed in
// the policy table starts with
//   if (AutocastInputs cast{"mm", {&a, &b}}) return mm(cast[0], cast[1]);
// which costs one thread-local load when autocast is off, and otherwise re-enters the op with its
// inputs cast as the table says (the second entry finds nothing left to cast).
#pragma once

#include <initializer_list>
#include <string_view>
#include <vector>

#include "gradus/amp/autocast.h"
#include "gradus/core/tensor.h"

namespace gradus::ops {

struct AutocastState {
  bool enabled = false;
  DType dtype = DType::bf16;
  bool cache_weights = true;
};

namespace detail {
extern thread_local AutocastState t_autocast;
}

inline const AutocastState& autocast_state() {
  return detail::t_autocast;
}

class AutocastInputs {
 public:
  AutocastInputs(std::string_view op, std::initializer_list<const Tensor*> inputs) {
    if (detail::t_autocast.enabled) apply(op, inputs.begin(), inputs.size());
  }
  explicit operator bool() const { return changed_; }
  const Tensor& operator[](size_t i) const { return out_[i]; }

 private:
  void apply(std::string_view op, const Tensor* const* inputs, size_t n);
  std::vector<Tensor> out_;
  bool changed_ = false;
};

// Turns autocast off for the life of the object (the engine runs every backward pass under one).
class AutocastSuspend {
 public:
  AutocastSuspend() : prev_(detail::t_autocast.enabled) { detail::t_autocast.enabled = false; }
  ~AutocastSuspend() { detail::t_autocast.enabled = prev_; }
  AutocastSuspend(const AutocastSuspend&) = delete;
  AutocastSuspend& operator=(const AutocastSuspend&) = delete;

 private:
  bool prev_;
};

}  // namespace gradus::ops
