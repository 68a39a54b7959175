// Helpers shared by the fused NN kernels of the CPU backend (softmax, cross-entropy, norms,
// convolution, pooling): they compute in float32 or float64, so half-precision tensors go through
// float32 copies that are rounded once when written back.
#pragma once

#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace gradus::backend::cpu {

// Half-precision tensors are computed in float32 copies, rounded once when copied back.
struct F32Args {
  CpuBackend& be;
  std::vector<std::pair<Tensor, Tensor>> back;  // (float32 copy, original output)
  static bool native(const Tensor& t) {
    return !t.defined() || t.dtype() == DType::f32 || t.dtype() == DType::f64;
  }
  Tensor in(const Tensor& t) {
    if (native(t)) return t;
    Tensor f = empty(t.sizes(), {DType::f32, t.device()});
    be.copy(t, f);
    return f;
  }
  // An output computed in a float32 copy; read_too also copies its current values in (for
  // in-place updates such as running statistics).
  Tensor out(const Tensor& t, bool read_too = false) {
    if (native(t)) return t;
    Tensor f = read_too ? in(t) : empty(t.sizes(), {DType::f32, t.device()});
    back.emplace_back(f, t);
    return f;
  }
  void finish() {
    for (auto& [f, t] : back) be.copy(f, t);
  }
};

// Calls fn(double{}) for float64 tensors and fn(float{}) for everything else (float32 and the
// half types, which arrive as float32 copies).
template <typename Fn>
void dispatch_f(DType t, Fn&& fn) {
  if (t == DType::f64)
    fn(double{});
  else
    fn(float{});
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

}  // namespace gradus::backend::cpu
