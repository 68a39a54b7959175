// Elementwise kernels: unary, binary and ternary maps selected by enum.
//
// Every call goes through blocked_map (loops.h): operands are walked in coalesced strided runs,
// cut into blocks of kBlock elements; blocks already in the compute type with unit stride are used
// in place, others (strided, broadcast, f16/bf16, integers) are converted into per-thread buffers.
// The per-block kernels below are plain `omp simd` loops over raw pointers, one switch per block:
// only float and double instantiate each op. Integers compute in int64 (integer-valued ops) or fall
// back to double for float-valued ones (the op layer normally casts ints to float first).
#include <cmath>
#include <numbers>

#include "backend/common/op_meta.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/swiglu.h"
#include "backend/cpu/vec_math.h"

namespace gradus::backend::cpu {
namespace {

// ------------------------------------------------------------------------------- scalar math
using vec::gelu;
using vec::gelu_grad;
using vec::gelu_tanh;
using vec::gelu_tanh_grad;
using vec::silu_grad;
template <typename C>
inline C m_exp(C x) {
  return vec::exp(x);
}
template <typename C>
inline C m_tanh(C x) {
  return vec::tanh(x);
}
template <typename C>
inline C m_sigmoid(C x) {
  return vec::sigmoid(x);
}
template <typename C>
inline C m_erf(C x) {
  return vec::erf(x);
}

template <typename C>
inline C sign_of(C v) {
  return static_cast<C>((C(0) < v) - (v < C(0)));  // sign(NaN) = 0 like PyTorch
}

// Propagates NaN from either side (torch.maximum / minimum).
template <typename C>
inline C max_nan(C a, C b) {
  C r = a > b ? a : b;
  r = b != b ? b : r;
  return a != a ? a : r;
}
template <typename C>
inline C min_nan(C a, C b) {
  C r = a < b ? a : b;
  r = b != b ? b : r;
  return a != a ? a : r;
}

// Python % : the result takes the sign of the divisor.
template <typename C>
inline C python_mod(C a, C b) {
  C r = std::fmod(a, b);
  return (r != C(0) && ((r < C(0)) != (b < C(0)))) ? r + b : r;
}

// ---------------------------------------------------------------------------- unary blocks
#define GRADUS_MAP1(EXPR)                                 \
  {                                                       \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) { \
      const C v = x[i];                                   \
      y[i] = (EXPR);                                      \
    }                                                     \
    return;                                               \
  }

template <typename C>
void unary_float(UnaryOp op, const C* x, C* y, int64_t n, double a_d, double b_d) {
  const C a = static_cast<C>(a_d), b = static_cast<C>(b_d);
  switch (op) {
    case UnaryOp::identity:
    case UnaryOp::logical_not:  // bool-valued ops are handled by unary_pred
    case UnaryOp::isnan:
    case UnaryOp::isinf:
      GRADUS_MAP1(v)
    case UnaryOp::neg:
      GRADUS_MAP1(-v)
    case UnaryOp::abs:
      GRADUS_MAP1(std::fabs(v))
    case UnaryOp::sign:
      GRADUS_MAP1(sign_of(v))
    case UnaryOp::exp:
      GRADUS_MAP1(m_exp(v))
    case UnaryOp::log:
      GRADUS_MAP1(std::log(v))
    case UnaryOp::log1p:
      GRADUS_MAP1(std::log1p(v))
    case UnaryOp::expm1:
      GRADUS_MAP1(std::expm1(v))
    case UnaryOp::sqrt:
      GRADUS_MAP1(std::sqrt(v))
    case UnaryOp::rsqrt:
      GRADUS_MAP1(C(1) / std::sqrt(v))
    case UnaryOp::reciprocal:
      GRADUS_MAP1(C(1) / v)
    case UnaryOp::square:
      GRADUS_MAP1(v * v)
    case UnaryOp::sin:
      GRADUS_MAP1(std::sin(v))
    case UnaryOp::cos:
      GRADUS_MAP1(std::cos(v))
    case UnaryOp::tanh:
      GRADUS_MAP1(m_tanh(v))
    case UnaryOp::sigmoid:
      GRADUS_MAP1(m_sigmoid(v))
    case UnaryOp::relu:
      GRADUS_MAP1(v < C(0) ? C(0) : v)  // keeps NaN, like torch.relu
    case UnaryOp::leaky_relu:
      GRADUS_MAP1(v > C(0) ? v : v * a)
    case UnaryOp::gelu:
      GRADUS_MAP1(gelu(v))
    case UnaryOp::gelu_tanh:
      GRADUS_MAP1(gelu_tanh(v))
    case UnaryOp::silu:
      GRADUS_MAP1(v * m_sigmoid(v))
    case UnaryOp::softplus:  // a = beta, b = threshold
      GRADUS_MAP1(v * a > b ? v : std::log1p(m_exp(v * a)) / a)
    case UnaryOp::erf:
      GRADUS_MAP1(m_erf(v))
    case UnaryOp::floor:
      GRADUS_MAP1(std::floor(v))
    case UnaryOp::ceil:
      GRADUS_MAP1(std::ceil(v))
    case UnaryOp::round:
      GRADUS_MAP1(std::nearbyint(v))  // half to even in the default rounding mode
    case UnaryOp::affine:
      GRADUS_MAP1(a * v + b)
    case UnaryOp::pow_scalar:
      if (a_d == 2.0) GRADUS_MAP1(v * v)
      if (a_d == 3.0) GRADUS_MAP1(v * v * v)
      if (a_d == 1.0) GRADUS_MAP1(v)
      if (a_d == 0.5) GRADUS_MAP1(std::sqrt(v))
      if (a_d == -0.5) GRADUS_MAP1(C(1) / std::sqrt(v))
      if (a_d == -1.0) GRADUS_MAP1(C(1) / v)
      if (a_d == -2.0) GRADUS_MAP1(C(1) / (v * v))
      GRADUS_MAP1(std::pow(v, a))
    case UnaryOp::rpow_scalar:
      GRADUS_MAP1(std::pow(a, v))
    case UnaryOp::clamp: {  // NaN bounds mean "no bound"; NaN inputs stay NaN
      const bool lo = !std::isnan(a_d), hi = !std::isnan(b_d);
      if (lo && hi) GRADUS_MAP1(v < a ? a : (v > b ? b : v))
      if (lo) GRADUS_MAP1(v < a ? a : v)
      if (hi) GRADUS_MAP1(v > b ? b : v)
      GRADUS_MAP1(v)
    }
    case UnaryOp::tanh_grad_from_output:
      GRADUS_MAP1(C(1) - v * v)
    case UnaryOp::sigmoid_grad_from_output:
      GRADUS_MAP1(v * (C(1) - v))
  }
}

// Unary ops with integer results for integer inputs (computed exactly by unary_int).
bool int_valued(UnaryOp op, double a, double b) {
  switch (op) {
    case UnaryOp::identity:
    case UnaryOp::floor:
    case UnaryOp::ceil:
    case UnaryOp::round:
    case UnaryOp::neg:
    case UnaryOp::abs:
    case UnaryOp::sign:
    case UnaryOp::square:
    case UnaryOp::relu:
    case UnaryOp::clamp:
      return true;
    case UnaryOp::affine:
      return a == std::trunc(a) && b == std::trunc(b);
    default:
      return false;
  }
}

void unary_int(UnaryOp op, const int64_t* x, int64_t* y, int64_t n, double a_d, double b_d) {
  using C = int64_t;
  switch (op) {
    case UnaryOp::identity:
    case UnaryOp::floor:
    case UnaryOp::ceil:
    case UnaryOp::round:
      GRADUS_MAP1(v)
    case UnaryOp::neg:
      GRADUS_MAP1(-v)
    case UnaryOp::abs:
      GRADUS_MAP1(v < 0 ? -v : v)
    case UnaryOp::sign:
      GRADUS_MAP1(sign_of(v))
    case UnaryOp::square:
      GRADUS_MAP1(v * v)
    case UnaryOp::relu:
      GRADUS_MAP1(v < 0 ? C(0) : v)
    case UnaryOp::affine: {
      const C a = static_cast<C>(a_d), b = static_cast<C>(b_d);
      GRADUS_MAP1(a * v + b)
    }
    case UnaryOp::clamp: {
      const C lo =
          std::isnan(a_d) ? std::numeric_limits<C>::min() : float_to_int<C>(std::ceil(a_d));
      const C hi =
          std::isnan(b_d) ? std::numeric_limits<C>::max() : float_to_int<C>(std::floor(b_d));
      GRADUS_MAP1(v < lo ? lo : (v > hi ? hi : v))
    }
    default:
      GRADUS_MAP1(v)
  }
}
#undef GRADUS_MAP1

// Bool-valued unary ops.
template <typename C>
void unary_pred(UnaryOp op, const C* x, bool* y, int64_t n) {
  switch (op) {
    case UnaryOp::isnan:
      if constexpr (std::is_floating_point_v<C>) {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] != x[i];
      } else {
        for (int64_t i = 0; i < n; ++i) y[i] = false;
      }
      return;
    case UnaryOp::isinf:
      if constexpr (std::is_floating_point_v<C>) {
        for (int64_t i = 0; i < n; ++i) y[i] = std::isinf(x[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) y[i] = false;
      }
      return;
    default:  // logical_not
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] == C(0);
      return;
  }
}

// --------------------------------------------------------------------------- binary blocks
#define GRADUS_MAP2(EXPR)                                 \
  {                                                       \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) { \
      [[maybe_unused]] const C a = x[i], b = z[i];        \
      y[i] = (EXPR);                                      \
    }                                                     \
    return;                                               \
  }

template <typename C>
void binary_float(BinaryOp op, const C* x, const C* z, C* y, int64_t n, double alpha_d) {
  const C alpha = static_cast<C>(alpha_d);
  switch (op) {
    case BinaryOp::add:
      if (alpha_d == 1.0) GRADUS_MAP2(a + b)
      GRADUS_MAP2(a + alpha * b)
    case BinaryOp::sub:
      if (alpha_d == 1.0) GRADUS_MAP2(a - b)
      GRADUS_MAP2(a - alpha * b)
    case BinaryOp::mul:
      GRADUS_MAP2(a * b)
    case BinaryOp::div:
      GRADUS_MAP2(a / b)
    case BinaryOp::pow:
      GRADUS_MAP2(std::pow(a, b))
    case BinaryOp::maximum:
      GRADUS_MAP2(max_nan(a, b))
    case BinaryOp::minimum:
      GRADUS_MAP2(min_nan(a, b))
    case BinaryOp::atan2:
      GRADUS_MAP2(std::atan2(a, b))
    case BinaryOp::fmod:
      GRADUS_MAP2(std::fmod(a, b))
    case BinaryOp::remainder:
      GRADUS_MAP2(python_mod(a, b))
    case BinaryOp::relu_backward:
      GRADUS_MAP2(b > C(0) ? a : C(0))
    case BinaryOp::leaky_relu_backward:
      GRADUS_MAP2(b > C(0) ? a : a * alpha)
    case BinaryOp::gelu_backward:
      GRADUS_MAP2(a * gelu_grad(b))
    case BinaryOp::gelu_tanh_backward:
      GRADUS_MAP2(a * gelu_tanh_grad(b))
    case BinaryOp::silu_backward:
      GRADUS_MAP2(a * silu_grad(b))
    case BinaryOp::sign_mul:
      GRADUS_MAP2(a * sign_of(b))
    case BinaryOp::swiglu:
      if constexpr (std::is_same_v<C, float>) return swiglu::forward(x, z, y, n);
      GRADUS_MAP2(a * m_sigmoid(a) * b)
    default:  // comparisons and logic are bool-valued: binary_pred
      GRADUS_MAP2(C(0))
  }
}

bool int_valued(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
    case BinaryOp::sub:
    case BinaryOp::mul:
    case BinaryOp::maximum:
    case BinaryOp::minimum:
    case BinaryOp::relu_backward:
    case BinaryOp::sign_mul:
    case BinaryOp::fmod:
    case BinaryOp::remainder:
    case BinaryOp::pow:
      return true;
    default:
      return false;
  }
}

// Integer arithmetic in int64 (wraps on overflow when stored). Division by zero in fmod /
// remainder gives 0 instead of trapping.
void binary_int(BinaryOp op, const int64_t* x, const int64_t* z, int64_t* y, int64_t n,
                double alpha_d) {
  using C = int64_t;
  const C alpha = static_cast<C>(alpha_d);
  switch (op) {
    case BinaryOp::add:
      GRADUS_MAP2(a + alpha * b)
    case BinaryOp::sub:
      GRADUS_MAP2(a - alpha * b)
    case BinaryOp::mul:
      GRADUS_MAP2(a * b)
    case BinaryOp::maximum:
      GRADUS_MAP2(a > b ? a : b)
    case BinaryOp::minimum:
      GRADUS_MAP2(a < b ? a : b)
    case BinaryOp::relu_backward:
      GRADUS_MAP2(b > 0 ? a : C(0))
    case BinaryOp::sign_mul:
      GRADUS_MAP2(a * sign_of(b))
    case BinaryOp::fmod:
      for (int64_t i = 0; i < n; ++i) y[i] = (z[i] == 0 || z[i] == -1) ? 0 : x[i] % z[i];
      return;
    case BinaryOp::remainder:
      for (int64_t i = 0; i < n; ++i) {
        const C a = x[i], b = z[i];
        const C r = (b == 0 || b == -1) ? 0 : a % b;
        y[i] = (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
      }
      return;
    case BinaryOp::pow:  // exact integer power; negative exponents truncate toward zero
      for (int64_t i = 0; i < n; ++i) {
        C base = x[i], e = z[i], r = 1;
        if (e < 0) {
          y[i] = base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
          continue;
        }
        while (e > 0) {
          if (e & 1) r = static_cast<C>(static_cast<uint64_t>(r) * static_cast<uint64_t>(base));
          base = static_cast<C>(static_cast<uint64_t>(base) * static_cast<uint64_t>(base));
          e >>= 1;
        }
        y[i] = r;
      }
      return;
    default:
      GRADUS_MAP2(a)
  }
}
#undef GRADUS_MAP2

template <typename C>
void binary_pred(BinaryOp op, const C* x, const C* z, bool* y, int64_t n) {
#define GRADUS_PRED(EXPR)                        \
  for (int64_t i = 0; i < n; ++i) {              \
    [[maybe_unused]] const C a = x[i], b = z[i]; \
    y[i] = (EXPR);                               \
  }                                              \
  return;
  switch (op) {
    case BinaryOp::eq:
      GRADUS_PRED(a == b)
    case BinaryOp::ne:
      GRADUS_PRED(a != b)
    case BinaryOp::lt:
      GRADUS_PRED(a < b)
    case BinaryOp::le:
      GRADUS_PRED(a <= b)
    case BinaryOp::gt:
      GRADUS_PRED(a > b)
    case BinaryOp::ge:
      GRADUS_PRED(a >= b)
    case BinaryOp::logical_and:
      GRADUS_PRED(a != C(0) && b != C(0))
    case BinaryOp::logical_or:
      GRADUS_PRED(a != C(0) || b != C(0))
    case BinaryOp::logical_xor:
      GRADUS_PRED((a != C(0)) != (b != C(0)))
    default:
      GRADUS_PRED(false)
  }
#undef GRADUS_PRED
}

// -------------------------------------------------------------------------- ternary blocks
template <typename C>
void ternary_float(TernaryOp op, const C* x, const C* z, const C* w, C* y, int64_t n,
                   double alpha_d) {
  const C alpha = static_cast<C>(alpha_d);
  switch (op) {
    case TernaryOp::where:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] != C(0) ? z[i] : w[i];
      return;
    case TernaryOp::lerp:  // PyTorch's two-sided form: exact at weight 0 and 1
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const C s = x[i], e = z[i], t = w[i];
        y[i] = std::fabs(t) < C(0.5) ? s + t * (e - s) : e - (e - s) * (C(1) - t);
      }
      return;
    case TernaryOp::addcmul:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] + alpha * z[i] * w[i];
      return;
  }
}

// Runs `float_kernel(const F* in..., F* out, n)` on int64 blocks by converting through double.
template <int NIN, typename K>
void via_double(const int64_t* const* in, int64_t* y, int64_t n, const K& float_kernel) {
  double buf[NIN + 1][kBlock] = {};
  const double* ptrs[NIN];
  for (int k = 0; k < NIN; ++k) {
    for (int64_t i = 0; i < n; ++i) buf[k][i] = static_cast<double>(in[k][i]);
    ptrs[k] = buf[k];
  }
  float_kernel(ptrs, buf[NIN], n);
  for (int64_t i = 0; i < n; ++i) y[i] = float_to_int<int64_t>(buf[NIN][i]);
}

}  // namespace

// ------------------------------------------------------------------------------ entry points
void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) {
  if (out.numel() == 0) return;
  const bool pred = common::is_predicate(op);
  const std::array<const Tensor*, 1> ins{&x};
  switch (compute_kind(x.dtype())) {
    case ComputeKind::f32:
      if (pred) {
        return blocked_map<float, bool, 1>(
            out, ins,
            [&](const float* const* in, bool* y, int64_t n) { unary_pred(op, in[0], y, n); });
      }
      return blocked_map<float, float, 1>(out, ins,
                                          [&](const float* const* in, float* y, int64_t n) {
                                            unary_float<float>(op, in[0], y, n, a, b);
                                          });
    case ComputeKind::f64:
      if (pred) {
        return blocked_map<double, bool, 1>(
            out, ins,
            [&](const double* const* in, bool* y, int64_t n) { unary_pred(op, in[0], y, n); });
      }
      return blocked_map<double, double, 1>(out, ins,
                                            [&](const double* const* in, double* y, int64_t n) {
                                              unary_float<double>(op, in[0], y, n, a, b);
                                            });
    case ComputeKind::i64:
      if (pred) {
        return blocked_map<int64_t, bool, 1>(
            out, ins,
            [&](const int64_t* const* in, bool* y, int64_t n) { unary_pred(op, in[0], y, n); });
      }
      return blocked_map<int64_t, int64_t, 1>(
          out, ins, [&](const int64_t* const* in, int64_t* y, int64_t n) {
            if (int_valued(op, a, b)) return unary_int(op, in[0], y, n, a, b);
            via_double<1>(in, y, n, [&](const double* const* d, double* r, int64_t m) {
              unary_float<double>(op, d[0], r, m, a, b);
            });
          });
  }
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
                        double alpha) {
  if (out.numel() == 0) return;
  const std::array<const Tensor*, 2> ins{&a, &b};
  const bool pred = common::is_predicate(op);
  switch (compute_kind(a.dtype())) {
    case ComputeKind::f32:
      if (pred) {
        return blocked_map<float, bool, 2>(out, ins,
                                           [&](const float* const* in, bool* y, int64_t n) {
                                             binary_pred(op, in[0], in[1], y, n);
                                           });
      }
      return blocked_map<float, float, 2>(out, ins,
                                          [&](const float* const* in, float* y, int64_t n) {
                                            binary_float<float>(op, in[0], in[1], y, n, alpha);
                                          });
    case ComputeKind::f64:
      if (pred) {
        return blocked_map<double, bool, 2>(out, ins,
                                            [&](const double* const* in, bool* y, int64_t n) {
                                              binary_pred(op, in[0], in[1], y, n);
                                            });
      }
      return blocked_map<double, double, 2>(out, ins,
                                            [&](const double* const* in, double* y, int64_t n) {
                                              binary_float<double>(op, in[0], in[1], y, n, alpha);
                                            });
    case ComputeKind::i64:
      if (pred) {
        return blocked_map<int64_t, bool, 2>(out, ins,
                                             [&](const int64_t* const* in, bool* y, int64_t n) {
                                               binary_pred(op, in[0], in[1], y, n);
                                             });
      }
      return blocked_map<int64_t, int64_t, 2>(
          out, ins, [&](const int64_t* const* in, int64_t* y, int64_t n) {
            if (int_valued(op)) return binary_int(op, in[0], in[1], y, n, alpha);
            via_double<2>(in, y, n, [&](const double* const* d, double* r, int64_t m) {
              binary_float<double>(op, d[0], d[1], r, m, alpha);
            });
          });
  }
}

void CpuBackend::ternary(TernaryOp op, const Tensor& a, const Tensor& b, const Tensor& c,
                         const Tensor& out, double alpha) {
  if (out.numel() == 0) return;
  const std::array<const Tensor*, 3> ins{&a, &b, &c};
  // where's condition is bool; the values decide the compute type.
  switch (compute_kind(b.dtype())) {
    case ComputeKind::f32:
      return blocked_map<float, float, 3>(
          out, ins, [&](const float* const* in, float* y, int64_t n) {
            ternary_float<float>(op, in[0], in[1], in[2], y, n, alpha);
          });
    case ComputeKind::f64:
      return blocked_map<double, double, 3>(
          out, ins, [&](const double* const* in, double* y, int64_t n) {
            ternary_float<double>(op, in[0], in[1], in[2], y, n, alpha);
          });
    case ComputeKind::i64:
      return blocked_map<int64_t, int64_t, 3>(
          out, ins, [&](const int64_t* const* in, int64_t* y, int64_t n) {
            if (op == TernaryOp::where) {
              for (int64_t i = 0; i < n; ++i) y[i] = in[0][i] != 0 ? in[1][i] : in[2][i];
            } else if (op == TernaryOp::addcmul) {
              const int64_t al = static_cast<int64_t>(alpha);
              for (int64_t i = 0; i < n; ++i) y[i] = in[0][i] + al * in[1][i] * in[2][i];
            } else {
              via_double<3>(in, y, n, [&](const double* const* d, double* r, int64_t m) {
                ternary_float<double>(op, d[0], d[1], d[2], r, m, alpha);
              });
            }
          });
  }
}

}  // namespace gradus::backend::cpu
