// The op harness (like ggml's test-backend-ops): a table of every op of gradus/ops.h, each entry an
// input generator plus the op as a lambda. harness_test.cpp runs every entry on every device
// (cpu, and cuda:0 when present) and every dtype the entry supports, against the same op run on
// CPU float64 inputs, and gradchecks every differentiable entry with float64 central differences.
//
// Inputs are described, not built, so one description yields the test inputs (any dtype, device
// and memory layout), the float64 reference inputs (the same values, rounded through the test
// dtype first so that only the op's own error is measured) and the perturbed inputs of the
// finite-difference gradcheck.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace gradus::harness {

// How an input is laid out in memory. The op always sees the logical shape; the leaf that
// requires grad is the contiguous base tensor the view is taken of, so gradients flow through
// the view ops too.
enum class Layout : uint8_t {
  contiguous,
  transposed,     // base has the last two dims swapped; view = transpose(-2, -1)
  strided,        // base last dim is 2n+1; view = slice(-1, 1, 2n+1, 2) (offset and stride 2)
  expanded,       // base dim 0 is 1; view = expand(shape) (stride 0)
  channels_last,  // base moves dim 1 last (NHWC for 4-D); view = permute back
};

// What an input holds.
enum class Kind : uint8_t {
  floating,  // uniform in [lo, hi), pairwise distinct, in the test dtype (integers in
             // [5 lo, 5 hi) for int dtypes)
  ties,      // floating, but multiples of 0.5 in [lo, hi] so comparisons see equal values
  special,   // floating with NaN, +inf and -inf mixed in (isnan, isinf, isfinite)
  index,     // i64 integers in [lo, hi)
  boolean,   // bool, true with probability 1/2
};

struct In {
  Shape shape;
  Layout layout = Layout::contiguous;
  double lo = -1.0, hi = 1.0;
  Kind kind = Kind::floating;
  bool grad = true;  // a floating input the gradient checks differentiate
};

// Input shorthands for the tables.
inline In f(Shape s, Layout l = Layout::contiguous) {
  return {std::move(s), l};
}
inline In range(Shape s, double lo, double hi, Layout l = Layout::contiguous) {
  return {std::move(s), l, lo, hi};
}
inline In pos(Shape s, Layout l = Layout::contiguous) {
  return range(std::move(s), 0.5, 2.0, l);
}
inline In ties(Shape s) {
  return {std::move(s), Layout::contiguous, -2, 2, Kind::ties, false};
}
inline In special(Shape s) {
  return {std::move(s), Layout::contiguous, -2, 2, Kind::special, false};
}
inline In idx(Shape s, int64_t lo, int64_t hi, Layout l = Layout::contiguous) {
  return {std::move(s), l, static_cast<double>(lo), static_cast<double>(hi), Kind::index, false};
}
inline In mask(Shape s) {
  return {std::move(s), Layout::contiguous, 0, 1, Kind::boolean, false};
}
inline In nograd(In in) {
  in.grad = false;
  return in;
}

using Inputs = std::vector<Tensor>;
using OpFn = std::function<std::vector<Tensor>(const Inputs&)>;
using OpFn1 = std::function<Tensor(const Inputs&)>;

inline const std::vector<DType> kFloat = {DType::f32, DType::f64, DType::f16, DType::bf16};
inline const std::vector<DType> kFloatInt = {DType::f32,  DType::f64, DType::f16,
                                             DType::bf16, DType::i32, DType::i64};
inline const std::vector<DType> kFull = {DType::f32, DType::f64};  // no half support expected

struct OpCase {
  std::string name;  // unique, [A-Za-z0-9_]
  std::vector<In> inputs;
  OpFn fn;
  std::vector<DType> dtypes = kFloat;  // dtypes of the floating inputs
  bool differentiable = true;
  bool gradcheck = true;    // false: finite differences are meaningless (see the entry)
  int diff_outputs = -1;    // leading outputs entering the gradient checks; -1 = all floating
  double tol = 1.0;         // scales the forward tolerance (loosened only with a reason)
  double grad_tol = 1.0;    // scales the low-precision gradient tolerance
  bool check_dtype = true;  // floating outputs must have the test dtype
  double mag_floor = 1e-2;  // low-precision magnitude floor of forward outputs
  bool half_grads = true;   // compare f16/bf16 gradients (false: discontinuous, see entry)
  bool cuda_deterministic = true;  // false: atomics make CUDA results order-dependent

  OpCase& nondiff() {
    differentiable = false;
    return *this;
  }
  OpCase& no_gradcheck() {
    gradcheck = false;
    return *this;
  }
  OpCase& tolerance(double forward, double grad = 1.0) {
    tol = forward;
    grad_tol = grad;
    return *this;
  }
  OpCase& grad_outputs(int n) {
    diff_outputs = n;
    return *this;
  }
  OpCase& any_dtype() {
    check_dtype = false;
    return *this;
  }
  // The output sums O(1) terms that are each rounded to the low-precision dtype (a loss built
  // from ops): its absolute error scales with the terms, not with the (cancelled) result.
  OpCase& sums_rounded_terms() {
    mag_floor = 1.0;
    return *this;
  }
  OpCase& no_half_grads() {
    half_grads = false;
    return *this;
  }
  OpCase& atomics() {
    cuda_deterministic = false;
    return *this;
  }
};

// A single-output entry.
OpCase op(std::string name, std::vector<In> inputs, OpFn1 fn, std::vector<DType> dtypes = kFloat);
// A multi-output entry (split, chunk, max with indices, batch_norm with running stats).
OpCase opn(std::string name, std::vector<In> inputs, OpFn fn, std::vector<DType> dtypes = kFloat);

// The tables (harness_cases_*.cpp).
std::vector<OpCase> elementwise_cases();
std::vector<OpCase> reduction_cases();
std::vector<OpCase> linalg_shape_cases();
std::vector<OpCase> nn_cases();
const std::vector<OpCase>& all_cases();

// ------------------------------------------------------------------------ machinery (harness_core)
// Shape of the base tensor an input's view is taken of.
Shape base_shape(const In& in);
// Base values of every input, drawn from `seed` (integers when `dtype` is integral).
std::vector<std::vector<double>> draw_inputs(const OpCase& c, uint64_t seed, DType dtype);

struct Built {
  std::vector<Tensor> leaves;  // per input: the base tensor (requires grad when differentiated)
  Inputs inputs;               // per input: what the op sees
};
// Test inputs: floating inputs in `dtype` on `device` with their layout. With `reference`, the
// values are rounded through `dtype`, then made float64 on the CPU and contiguous.
Built build_inputs(const OpCase& c, const std::vector<std::vector<double>>& base, DType dtype,
                   Device device, bool requires_grad, bool reference);

// The number of outputs entering gradient checks.
size_t num_diff_outputs(const OpCase& c, const std::vector<Tensor>& outs);

// Compares actual with expected (any devices/dtypes; values compared as double) elementwise with
// |a - e| <= atol + rtol * |e|; NaN must match NaN. Prints the worst element on failure.
::testing::AssertionResult compare(const Tensor& actual, const Tensor& expected, double rtol,
                                   double atol, const std::string& what);
// Bitwise-equal values (NaNs equal), for the determinism check.
::testing::AssertionResult identical(const Tensor& a, const Tensor& b, const std::string& what);

struct Tolerance {
  double rtol, atol;
};
// Forward tolerance for an output of dtype `t` whose reference values are `expected`:
// f64 1e-10, f32 1e-5 rel / 1e-6 abs, f16 1e-3 and bf16 1.6e-2 relative to the magnitude
// (the mean |expected| joins the absolute term), integers and bool exact.
// `mag_floor` bounds the magnitude from below: 1e-2 for outputs; 1 for gradients, whose
// backward reductions (broadcast sums, matmul) add O(1) terms that were each rounded to the
// low-precision format, so a small, cancelled sum carries the terms' absolute error.
Tolerance tolerance_for(DType t, const Tensor& expected, double scale, double mag_floor = 1e-2);

// Replaces the CPU allocator while alive with one that fills every new buffer with 0xFF bytes
// (NaN for every float dtype, -1 for integers), so a kernel that leaves an element unwritten
// shows up as a NaN or a wrong index instead of a plausible stale value.
class PoisonGuard {
 public:
  PoisonGuard();
  ~PoisonGuard();
  PoisonGuard(const PoisonGuard&) = delete;
  PoisonGuard& operator=(const PoisonGuard&) = delete;

 private:
  Allocator* previous_;
};

// testing::fresh_seed(), or GRADUS_HARNESS_SEED from the environment to replay a failure.
uint64_t case_seed();

std::string device_tag(Device d);  // cpu / cuda0
std::string dtype_tag(DType t);    // f32 / f64 / f16 / bf16 / i32 / i64

}  // namespace gradus::harness
