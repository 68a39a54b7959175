// Binary and ternary elementwise kernels. As in unary.cu: a kernel per op for f32 / f16 / bf16,
// the op at run time for f64 and integers; comparisons and logic write bool.
#include "backend/common/op_meta.h"
#include "backend/cuda/elementwise.cuh"
#include "backend/cuda/ops.cuh"

namespace gradus::backend::cuda {
namespace {

template <BinaryOp OP, typename C>
struct BinaryConst {
  C alpha;
  __device__ __forceinline__ C operator()(C a, C b) const {
    return binary_float<C>(OP, a, b, alpha);
  }
};

template <typename C>
struct BinaryDyn {
  BinaryOp op;
  double alpha;
  __device__ __forceinline__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) {
      return binary_int(op, a, b, alpha);
    } else {
      return binary_float<C>(op, a, b, static_cast<C>(alpha));
    }
  }
};

template <typename C>
struct BinaryPred {
  BinaryOp op;
  __device__ __forceinline__ bool operator()(C a, C b) const { return binary_pred<C>(op, a, b); }
};

template <typename T>
void binary_typed(BinaryOp op, const Iter<3>& it, double alpha, cudaStream_t stream) {
  using C = compute_t<T>;
  const C al = static_cast<C>(alpha);
#define GRADUS_BINARY_CASE(OP) \
  case BinaryOp::OP:           \
    return map2<T, T, T>(it, BinaryConst<BinaryOp::OP, C>{al}, stream, "binary " #OP);
  switch (op) {
    GRADUS_BINARY_CASE(add)
    GRADUS_BINARY_CASE(sub)
    GRADUS_BINARY_CASE(mul)
    GRADUS_BINARY_CASE(div)
    GRADUS_BINARY_CASE(pow)
    GRADUS_BINARY_CASE(maximum)
    GRADUS_BINARY_CASE(minimum)
    GRADUS_BINARY_CASE(atan2)
    GRADUS_BINARY_CASE(fmod)
    GRADUS_BINARY_CASE(remainder)
    GRADUS_BINARY_CASE(relu_backward)
    GRADUS_BINARY_CASE(leaky_relu_backward)
    GRADUS_BINARY_CASE(gelu_backward)
    GRADUS_BINARY_CASE(gelu_tanh_backward)
    GRADUS_BINARY_CASE(silu_backward)
    GRADUS_BINARY_CASE(sign_mul)
    GRADUS_BINARY_CASE(swiglu)
    default:
      return map2<T, T, T>(it, BinaryDyn<C>{op, alpha}, stream, "binary");
  }
#undef GRADUS_BINARY_CASE
}

// ------------------------------------------------------------------------------- ternary
template <typename C>
struct TernaryFn {
  TernaryOp op;
  double alpha;
  __device__ __forceinline__ C operator()(C x, C y, C z) const {
    if constexpr (std::is_integral_v<C>) {
      if (op == TernaryOp::addcmul) return x + static_cast<int64_t>(alpha) * y * z;
      // lerp of integers: through double, like the CPU
      const double s = static_cast<double>(x), e = static_cast<double>(y),
                   t = static_cast<double>(z);
      return float_to_int<int64_t>(fabs(t) < 0.5 ? s + t * (e - s) : e - (e - s) * (1.0 - t));
    } else {
      if (op == TernaryOp::addcmul) return x + static_cast<C>(alpha) * y * z;
      // PyTorch's two-sided lerp: exact at weight 0 and 1
      return fabs(z) < C(0.5) ? x + z * (y - x) : y - (y - x) * (C(1) - z);
    }
  }
};

template <typename C>
struct WhereFn {
  __device__ __forceinline__ C operator()(int64_t cond, C y, C z) const {
    return cond != 0 ? y : z;
  }
};

}  // namespace

void launch_binary(BinaryOp op, const Iter<3>& it, double alpha, cudaStream_t stream) {
  const DType t = it.dtype[1];
  if (common::is_predicate(op)) {
    return dispatch_all(t, [&](auto tag) {
      using T = decltype(tag);
      map2<bool, T, T>(it, BinaryPred<compute_t<T>>{op}, stream, "binary comparison");
    });
  }
  switch (t) {
    case DType::f32:
      return binary_typed<float>(op, it, alpha, stream);
    case DType::f16:
      return binary_typed<f16_t>(op, it, alpha, stream);
    case DType::bf16:
      return binary_typed<bf16_t>(op, it, alpha, stream);
    default:
      return dispatch_all(t, [&](auto tag) {
        using T = decltype(tag);
        using C = compute_t<T>;
        if constexpr (!std::is_same_v<C, float>) {
          map2<T, T, T>(it, BinaryDyn<C>{op, alpha}, stream, "binary");
        }
      });
  }
}

// it: out, a, b, c. where: a is bool, b / c / out share a dtype; others: one dtype.
void launch_ternary(TernaryOp op, const Iter<4>& it, double alpha, cudaStream_t stream) {
  const DType t = it.dtype[2];
  dispatch_all(t, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    if (op == TernaryOp::where) {
      map3<T, bool, T, T>(it, WhereFn<C>{}, stream, "where");
    } else {
      map3<T, T, T, T>(it, TernaryFn<C>{op, alpha}, stream, "ternary");
    }
  });
}

}  // namespace gradus::backend::cuda
