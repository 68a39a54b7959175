// Unary elementwise kernels. f32 / f16 / bf16 get one kernel per op (the op is a template
// constant, so each is a tight map); f64 and the integer types take the op at run time.
#include <cmath>

#include "backend/common/op_meta.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/ops.cuh"

namespace gradus::backend::cuda {
namespace {

// ------------------------------------------------------------------------------- functors
template <UnaryOp OP, typename C>
struct UnaryConst {
  UnaryScalars<C> s;
  __device__ __forceinline__ C operator()(C v) const { return unary_float<C>(OP, v, s); }
};

template <typename C>
struct UnaryDyn {
  UnaryOp op;
  UnaryScalars<C> s;
  __device__ __forceinline__ C operator()(C v) const {
    if constexpr (std::is_integral_v<C>) {
      return unary_int(op, v, s);
    } else {
      return unary_float<C>(op, v, s);
    }
  }
};

template <typename C>
struct UnaryPred {
  UnaryOp op;
  __device__ __forceinline__ bool operator()(C v) const { return unary_pred<C>(op, v); }
};

template <typename C>
UnaryScalars<C> make_scalars(UnaryOp op, double a, double b) {
  UnaryScalars<C> s{};
  s.ad = a;
  s.bd = b;
  s.has_lo = !std::isnan(a);
  s.has_hi = !std::isnan(b);
  if constexpr (std::is_integral_v<C>) {
    const bool integral = std::isfinite(a) && std::isfinite(b) && a == std::trunc(a) &&
                          b == std::trunc(b) && std::fabs(a) < 9.2e18 && std::fabs(b) < 9.2e18;
    s.a = integral ? static_cast<int64_t>(a) : 0;
    s.b = integral ? static_cast<int64_t>(b) : 0;
    // Integer clamp bounds: ceil / floor of the float bounds, saturated (CPU semantics).
    auto to_int = [](double v, int64_t fallback) {
      if (std::isnan(v)) return fallback;
      if (v >= 9.2233720368547758e18) return INT64_MAX;
      if (v < -9.2233720368547758e18) return INT64_MIN;
      return static_cast<int64_t>(v);
    };
    if (op == UnaryOp::clamp) {
      // float_to_int gives INT64_MIN for out-of-range values; keep that for parity.
      auto cpu_like = [](double v) {
        return v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? static_cast<int64_t>(v)
                                                                        : INT64_MIN;
      };
      s.ilo = std::isnan(a) ? INT64_MIN : cpu_like(std::ceil(a));
      s.ihi = std::isnan(b) ? INT64_MAX : cpu_like(std::floor(b));
    } else {
      s.ilo = to_int(a, INT64_MIN);
      s.ihi = to_int(b, INT64_MAX);
    }
  } else {
    s.a = static_cast<C>(a);
    s.b = static_cast<C>(b);
  }
  return s;
}

// One instantiation per (op, half/float type).
template <typename T>
void unary_typed(UnaryOp op, const Iter<2>& it, double a, double b, cudaStream_t stream) {
  using C = compute_t<T>;
  const UnaryScalars<C> s = make_scalars<C>(op, a, b);
#define GRADUS_UNARY_CASE(OP) \
  case UnaryOp::OP:           \
    return map1<T, T>(it, UnaryConst<UnaryOp::OP, C>{s}, stream, "unary " #OP);
  switch (op) {
    GRADUS_UNARY_CASE(identity)
    GRADUS_UNARY_CASE(neg)
    GRADUS_UNARY_CASE(abs)
    GRADUS_UNARY_CASE(sign)
    GRADUS_UNARY_CASE(exp)
    GRADUS_UNARY_CASE(log)
    GRADUS_UNARY_CASE(log1p)
    GRADUS_UNARY_CASE(expm1)
    GRADUS_UNARY_CASE(sqrt)
    GRADUS_UNARY_CASE(rsqrt)
    GRADUS_UNARY_CASE(reciprocal)
    GRADUS_UNARY_CASE(square)
    GRADUS_UNARY_CASE(sin)
    GRADUS_UNARY_CASE(cos)
    GRADUS_UNARY_CASE(tanh)
    GRADUS_UNARY_CASE(sigmoid)
    GRADUS_UNARY_CASE(relu)
    GRADUS_UNARY_CASE(leaky_relu)
    GRADUS_UNARY_CASE(gelu)
    GRADUS_UNARY_CASE(gelu_tanh)
    GRADUS_UNARY_CASE(silu)
    GRADUS_UNARY_CASE(softplus)
    GRADUS_UNARY_CASE(erf)
    GRADUS_UNARY_CASE(floor)
    GRADUS_UNARY_CASE(ceil)
    GRADUS_UNARY_CASE(round)
    GRADUS_UNARY_CASE(affine)
    GRADUS_UNARY_CASE(pow_scalar)
    GRADUS_UNARY_CASE(rpow_scalar)
    GRADUS_UNARY_CASE(clamp)
    GRADUS_UNARY_CASE(tanh_grad_from_output)
    GRADUS_UNARY_CASE(sigmoid_grad_from_output)
    default:  // predicates are handled by the caller
      return map1<T, T>(it, UnaryDyn<C>{op, s}, stream, "unary");
  }
#undef GRADUS_UNARY_CASE
}

}  // namespace

// it: operand 0 = out, operand 1 = x (same dtype, or bool out for predicates).
void launch_unary(UnaryOp op, const Iter<2>& it, double a, double b, cudaStream_t stream) {
  const DType t = it.dtype[1];
  if (common::is_predicate(op)) {
    return dispatch_all(t, [&](auto tag) {
      using T = decltype(tag);
      map1<bool, T>(it, UnaryPred<compute_t<T>>{op}, stream, "unary predicate");
    });
  }
  switch (t) {
    case DType::f32:
      return unary_typed<float>(op, it, a, b, stream);
    case DType::f16:
      return unary_typed<f16_t>(op, it, a, b, stream);
    case DType::bf16:
      return unary_typed<bf16_t>(op, it, a, b, stream);
    default:
      return dispatch_all(t, [&](auto tag) {
        using T = decltype(tag);
        using C = compute_t<T>;
        if constexpr (!std::is_same_v<C, float>) {  // float types took the switch above
          map1<T, T>(it, UnaryDyn<C>{op, make_scalars<C>(op, a, b)}, stream, "unary");
        }
      });
  }
}

}  // namespace gradus::backend::cuda
