// Scalar definitions of the elementwise ops (UnaryOp / BinaryOp / TernaryOp), the device twins of
// src/backend/cpu/elementwise.cpp. Each evaluator takes the op as a value: with a compile-time
// constant op the switch folds away; integer and f64 kernels pass it at run time.
#pragma once

#include "backend/cuda/common.cuh"

namespace gradus::backend::cuda {

// ------------------------------------------------------------------------------- helpers
__device__ __forceinline__ float m_tanh(float x) {
  return tanhf(x);
}
__device__ __forceinline__ double m_tanh(double x) {
  return tanh(x);
}
template <typename C>
__device__ __forceinline__ C m_sigmoid(C x) {
  return C(1) / (C(1) + m_exp(-x));
}
__device__ __forceinline__ float m_cdf(float x) {
  return normcdff(x);
}
__device__ __forceinline__ double m_cdf(double x) {
  return normcdf(x);
}

template <typename C>
__device__ __forceinline__ C sign_of(C v) {
  return static_cast<C>((C(0) < v) - (v < C(0)));  // sign(NaN) = 0 like PyTorch
}
template <typename C>
__device__ __forceinline__ C max_nan(C a, C b) {
  C r = a > b ? a : b;
  r = b != b ? b : r;
  return a != a ? a : r;
}
template <typename C>
__device__ __forceinline__ C min_nan(C a, C b) {
  C r = a < b ? a : b;
  r = b != b ? b : r;
  return a != a ? a : r;
}
template <typename C>
__device__ __forceinline__ C python_mod(C a, C b) {
  const C r = fmod(a, b);
  return (r != C(0) && ((r < C(0)) != (b < C(0)))) ? r + b : r;
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCoef = 0.044715;

template <typename C>
__device__ __forceinline__ C gelu_grad(C x) {
  const C pdf = m_exp(C(-0.5) * x * x) * C(0.39894228040143267794);
  return m_cdf(x) + x * pdf;
}
template <typename C>
__device__ __forceinline__ C gelu_tanh(C x) {
  const C u = C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x);
  return x * m_sigmoid(C(2) * u);
}
template <typename C>
__device__ __forceinline__ C gelu_tanh_grad(C x) {
  const C u = C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x);
  const C s = m_sigmoid(C(2) * u);
  return s + C(2) * x * s * (C(1) - s) * C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCoef) * x * x);
}
template <typename C>
__device__ __forceinline__ C silu_grad(C x) {
  const C s = m_sigmoid(x);
  return s * (C(1) + x * (C(1) - s));
}

// ------------------------------------------------------------------------------- unary
// Scalars of a unary op in the compute type, plus the originals (pow special cases, clamp's
// "no bound" NaNs, integer clamp bounds).
template <typename C>
struct UnaryScalars {
  C a, b;
  double ad, bd;
  bool has_lo, has_hi;
  int64_t ilo, ihi;  // integer clamp bounds
};

template <typename C>
__device__ __forceinline__ C unary_float(UnaryOp op, C v, const UnaryScalars<C>& s) {
  const C a = s.a, b = s.b;
  switch (op) {
    case UnaryOp::identity:
    case UnaryOp::logical_not:
    case UnaryOp::isnan:
    case UnaryOp::isinf:
      return v;
    case UnaryOp::neg:
      return -v;
    case UnaryOp::abs:
      return fabs(v);
    case UnaryOp::sign:
      return sign_of(v);
    case UnaryOp::exp:
      return m_exp(v);
    case UnaryOp::log:
      return m_log(v);
    case UnaryOp::log1p:
      return log1p(v);
    case UnaryOp::expm1:
      return expm1(v);
    case UnaryOp::sqrt:
      return m_sqrt(v);
    case UnaryOp::rsqrt:
      return C(1) / m_sqrt(v);
    case UnaryOp::reciprocal:
      return C(1) / v;
    case UnaryOp::square:
      return v * v;
    case UnaryOp::sin:
      return sin(v);
    case UnaryOp::cos:
      return cos(v);
    case UnaryOp::tanh:
      return m_tanh(v);
    case UnaryOp::sigmoid:
      return m_sigmoid(v);
    case UnaryOp::relu:
      return v < C(0) ? C(0) : v;
    case UnaryOp::leaky_relu:
      return v > C(0) ? v : v * a;
    case UnaryOp::gelu:
      return v * m_cdf(v);
    case UnaryOp::gelu_tanh:
      return gelu_tanh(v);
    case UnaryOp::silu:
      return v * m_sigmoid(v);
    case UnaryOp::softplus:
      return v * a > b ? v : log1p(m_exp(v * a)) / a;
    case UnaryOp::erf:
      return erf(v);
    case UnaryOp::floor:
      return floor(v);
    case UnaryOp::ceil:
      return ceil(v);
    case UnaryOp::round:
      return rint(v);
    case UnaryOp::affine:
      return a * v + b;
    case UnaryOp::pow_scalar:
      if (s.ad == 2.0) return v * v;
      if (s.ad == 3.0) return v * v * v;
      if (s.ad == 1.0) return v;
      if (s.ad == 0.5) return m_sqrt(v);
      if (s.ad == -0.5) return C(1) / m_sqrt(v);
      if (s.ad == -1.0) return C(1) / v;
      if (s.ad == -2.0) return C(1) / (v * v);
      return pow(v, a);
    case UnaryOp::rpow_scalar:
      return pow(a, v);
    case UnaryOp::clamp:
      if (s.has_lo && s.has_hi) return v < a ? a : (v > b ? b : v);
      if (s.has_lo) return v < a ? a : v;
      if (s.has_hi) return v > b ? b : v;
      return v;
    case UnaryOp::tanh_grad_from_output:
      return C(1) - v * v;
    case UnaryOp::sigmoid_grad_from_output:
      return v * (C(1) - v);
  }
  return v;
}

// Integer inputs: exact int64 arithmetic for integer-valued ops, else through double.
__device__ __forceinline__ int64_t unary_int(UnaryOp op, int64_t v,
                                             const UnaryScalars<int64_t>& s) {
  switch (op) {
    case UnaryOp::identity:
    case UnaryOp::floor:
    case UnaryOp::ceil:
    case UnaryOp::round:
      return v;
    case UnaryOp::neg:
      return -v;
    case UnaryOp::abs:
      return v < 0 ? -v : v;
    case UnaryOp::sign:
      return sign_of(v);
    case UnaryOp::square:
      return v * v;
    case UnaryOp::relu:
      return v < 0 ? 0 : v;
    case UnaryOp::affine:
      if (s.ad == trunc(s.ad) && s.bd == trunc(s.bd)) return s.a * v + s.b;
      break;
    case UnaryOp::clamp:
      return v < s.ilo ? s.ilo : (v > s.ihi ? s.ihi : v);
    default:
      break;
  }
  const UnaryScalars<double> d{s.ad, s.bd, s.ad, s.bd, s.has_lo, s.has_hi, 0, 0};
  return float_to_int<int64_t>(unary_float<double>(op, static_cast<double>(v), d));
}

template <typename C>
__device__ __forceinline__ bool unary_pred(UnaryOp op, C v) {
  switch (op) {
    case UnaryOp::isnan:
      if constexpr (std::is_floating_point_v<C>) return v != v;
      return false;
    case UnaryOp::isinf:
      if constexpr (std::is_floating_point_v<C>) return isinf(v);
      return false;
    default:
      return v == C(0);
  }
}

// ------------------------------------------------------------------------------- binary
template <typename C>
__device__ __forceinline__ C binary_float(BinaryOp op, C a, C b, C alpha) {
  switch (op) {
    case BinaryOp::add:
      return a + alpha * b;
    case BinaryOp::sub:
      return a - alpha * b;
    case BinaryOp::mul:
      return a * b;
    case BinaryOp::div:
      return a / b;
    case BinaryOp::pow:
      return pow(a, b);
    case BinaryOp::maximum:
      return max_nan(a, b);
    case BinaryOp::minimum:
      return min_nan(a, b);
    case BinaryOp::atan2:
      return atan2(a, b);
    case BinaryOp::fmod:
      return fmod(a, b);
    case BinaryOp::remainder:
      return python_mod(a, b);
    case BinaryOp::relu_backward:
      return b > C(0) ? a : C(0);
    case BinaryOp::leaky_relu_backward:
      return b > C(0) ? a : a * alpha;
    case BinaryOp::gelu_backward:
      return a * gelu_grad(b);
    case BinaryOp::gelu_tanh_backward:
      return a * gelu_tanh_grad(b);
    case BinaryOp::silu_backward:
      return a * silu_grad(b);
    case BinaryOp::sign_mul:
      return a * sign_of(b);
    case BinaryOp::swiglu:
      return a * m_sigmoid(a) * b;
    default:
      return C(0);
  }
}

__device__ __forceinline__ int64_t binary_int(BinaryOp op, int64_t a, int64_t b, double alpha_d) {
  const auto alpha = static_cast<int64_t>(alpha_d);
  switch (op) {
    case BinaryOp::add:
      return a + alpha * b;
    case BinaryOp::sub:
      return a - alpha * b;
    case BinaryOp::mul:
      return a * b;
    case BinaryOp::maximum:
      return a > b ? a : b;
    case BinaryOp::minimum:
      return a < b ? a : b;
    case BinaryOp::relu_backward:
      return b > 0 ? a : 0;
    case BinaryOp::sign_mul:
      return a * sign_of(b);
    case BinaryOp::fmod:
      return (b == 0 || b == -1) ? 0 : a % b;
    case BinaryOp::remainder: {
      const int64_t r = (b == 0 || b == -1) ? 0 : a % b;
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case BinaryOp::pow: {
      int64_t base = a, e = b, r = 1;
      if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
      while (e > 0) {
        if (e & 1) r = static_cast<int64_t>(static_cast<uint64_t>(r) * static_cast<uint64_t>(base));
        base = static_cast<int64_t>(static_cast<uint64_t>(base) * static_cast<uint64_t>(base));
        e >>= 1;
      }
      return r;
    }
    default:
      return float_to_int<int64_t>(
          binary_float<double>(op, static_cast<double>(a), static_cast<double>(b), alpha_d));
  }
}

template <typename C>
__device__ __forceinline__ bool binary_pred(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::eq:
      return a == b;
    case BinaryOp::ne:
      return a != b;
    case BinaryOp::lt:
      return a < b;
    case BinaryOp::le:
      return a <= b;
    case BinaryOp::gt:
      return a > b;
    case BinaryOp::ge:
      return a >= b;
    case BinaryOp::logical_and:
      return a != C(0) && b != C(0);
    case BinaryOp::logical_or:
      return a != C(0) || b != C(0);
    case BinaryOp::logical_xor:
      return (a != C(0)) != (b != C(0));
    default:
      return false;
  }
}

}  // namespace gradus::backend::cuda
