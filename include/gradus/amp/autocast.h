// gradus::amp autocast: run the ops that profit from 16-bit arithmetic in bf16 or f16 and keep the
// numerically sensitive ones in float32, without changing the model's code.
//
//   {
//     amp::Autocast autocast(DType::bf16);
//     Tensor loss = cross_entropy(model.forward(x), y);  // linear/conv in bf16, the loss in f32
//   }
//   loss.backward();  // parameters (float32 masters) get float32 gradients
//
// The scope is thread-local and nestable; `amp::Autocast off(DType::bf16, false)` turns it off
// inside an outer scope. Which op runs in which dtype is one table (autocast_policy, defined in
// src/ops/autocast.cpp, listed in docs/amp.md):
//   lower     matmul mm bmm linear conv2d: float32 inputs are cast to the autocast dtype; the
//             kernels accumulate in float32 (CPU: bf16 on the CPU's bf16 instructions through
//             oneDNN where it has them, else f32 compute on 16-bit storage; CUDA: tensor cores)
//   float32   exp log pow softmax log_softmax the losses, norms and sum/mean/var-like reductions:
//             16-bit inputs are cast up to float32, so the op computes and returns float32
//   others    run in whatever dtype their inputs have (relu, dropout, pooling, views, ...); ops
//             with several inputs (add, mul, where, cat, ...) promote to the widest of them

// float64 tensors are never cast. A parameter (a leaf that requires grad) is cast to the autocast
// dtype once per outermost scope and reused by every op that uses it, unless it was modified in
// place since; the cache is dropped when the outermost scope ends. Backward passes run with
// autocast off: each op's backward uses the dtypes its forward used.
#pragma once

#include <string_view>

#include "gradus/core/dtype.h"

namespace gradus::amp {

enum class CastPolicy { none, lower, float32 };

class Autocast {
 public:
  // dtype: bf16 or f16 (anything else is a DTypeError). cache_weights: reuse one cast of each
  // parameter for the whole outermost scope.
  explicit Autocast(DType dtype = DType::bf16, bool enabled = true, bool cache_weights = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
  bool prev_cache_;
};

// The calling thread's current autocast state.
bool is_autocast_enabled();
DType autocast_dtype();
// The policy the table gives an op (by the name its errors use, e.g. "linear"); none if absent.
CastPolicy autocast_policy(std::string_view op);
// Number of parameter casts held by this thread's cache (0 outside any scope). For tests/tools.
size_t autocast_cache_size();

}  // namespace gradus::amp
