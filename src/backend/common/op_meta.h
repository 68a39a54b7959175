// Device-neutral facts about the backend's enum-selected ops, in one table per enum: the name,
// the rule for the output's dtype and (for reductions) the value of a reduction over nothing.
// Both backends read these instead of keeping their own lists, so adding an op to an enum in
// backend.h means adding one row here and the per-device math in each backend — not editing
// predicate lists in several files. The static_asserts below check that row i describes
// enumerator i; tests/backend/op_meta_test.cpp checks every enumerator has its row, by name.
//
// Header-only and free of device code, so it is included from .cpp and .cu files alike.
#pragma once

#include <array>
#include <cstddef>
#include <limits>
#include <string_view>

#include "backend/backend.h"

namespace gradus::backend::common {

// What an op writes, relative to the dtype it computes in (its input's, after promotion).
enum class OutDType : uint8_t {
  same,     // the input's dtype
  boolean,  // predicates: comparisons, logical ops, isnan/isinf
  int64,    // indices (argmax / argmin)
};

template <typename Op>
struct OpInfo {
  Op op;
  std::string_view name;
  OutDType out = OutDType::same;
};

struct ReduceInfo {
  ReduceOp op;
  std::string_view name;
  OutDType out = OutDType::same;
  double empty_value = 0.0;  // the result of reducing zero elements (NaN: undefined)
};

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// clang-format off
inline constexpr std::array kUnaryOps = {
    OpInfo<UnaryOp>{UnaryOp::identity, "identity"},
    OpInfo<UnaryOp>{UnaryOp::neg, "neg"},
    OpInfo<UnaryOp>{UnaryOp::abs, "abs"},
    OpInfo<UnaryOp>{UnaryOp::sign, "sign"},
    OpInfo<UnaryOp>{UnaryOp::exp, "exp"},
    OpInfo<UnaryOp>{UnaryOp::log, "log"},
    OpInfo<UnaryOp>{UnaryOp::log1p, "log1p"},
    OpInfo<UnaryOp>{UnaryOp::expm1, "expm1"},
    OpInfo<UnaryOp>{UnaryOp::sqrt, "sqrt"},
    OpInfo<UnaryOp>{UnaryOp::rsqrt, "rsqrt"},
    OpInfo<UnaryOp>{UnaryOp::reciprocal, "reciprocal"},
    OpInfo<UnaryOp>{UnaryOp::square, "square"},
    OpInfo<UnaryOp>{UnaryOp::sin, "sin"},
    OpInfo<UnaryOp>{UnaryOp::cos, "cos"},
    OpInfo<UnaryOp>{UnaryOp::tanh, "tanh"},
    OpInfo<UnaryOp>{UnaryOp::sigmoid, "sigmoid"},
    OpInfo<UnaryOp>{UnaryOp::relu, "relu"},
    OpInfo<UnaryOp>{UnaryOp::leaky_relu, "leaky_relu"},
    OpInfo<UnaryOp>{UnaryOp::gelu, "gelu"},
    OpInfo<UnaryOp>{UnaryOp::gelu_tanh, "gelu_tanh"},
    OpInfo<UnaryOp>{UnaryOp::silu, "silu"},
    OpInfo<UnaryOp>{UnaryOp::softplus, "softplus"},
    OpInfo<UnaryOp>{UnaryOp::erf, "erf"},
    OpInfo<UnaryOp>{UnaryOp::floor, "floor"},
    OpInfo<UnaryOp>{UnaryOp::ceil, "ceil"},
    OpInfo<UnaryOp>{UnaryOp::round, "round"},
    OpInfo<UnaryOp>{UnaryOp::logical_not, "logical_not", OutDType::boolean},
    OpInfo<UnaryOp>{UnaryOp::isnan, "isnan", OutDType::boolean},
    OpInfo<UnaryOp>{UnaryOp::isinf, "isinf", OutDType::boolean},
    OpInfo<UnaryOp>{UnaryOp::affine, "affine"},
    OpInfo<UnaryOp>{UnaryOp::pow_scalar, "pow_scalar"},
    OpInfo<UnaryOp>{UnaryOp::rpow_scalar, "rpow_scalar"},
    OpInfo<UnaryOp>{UnaryOp::clamp, "clamp"},
    OpInfo<UnaryOp>{UnaryOp::tanh_grad_from_output, "tanh_grad_from_output"},
    OpInfo<UnaryOp>{UnaryOp::sigmoid_grad_from_output, "sigmoid_grad_from_output"},
};

inline constexpr std::array kBinaryOps = {
    OpInfo<BinaryOp>{BinaryOp::add, "add"},
    OpInfo<BinaryOp>{BinaryOp::sub, "sub"},
    OpInfo<BinaryOp>{BinaryOp::mul, "mul"},
    OpInfo<BinaryOp>{BinaryOp::div, "div"},
    OpInfo<BinaryOp>{BinaryOp::pow, "pow"},
    OpInfo<BinaryOp>{BinaryOp::maximum, "maximum"},
    OpInfo<BinaryOp>{BinaryOp::minimum, "minimum"},
    OpInfo<BinaryOp>{BinaryOp::atan2, "atan2"},
    OpInfo<BinaryOp>{BinaryOp::fmod, "fmod"},
    OpInfo<BinaryOp>{BinaryOp::remainder, "remainder"},
    OpInfo<BinaryOp>{BinaryOp::eq, "eq", OutDType::boolean},
    OpInfo<BinaryOp>{BinaryOp::ne, "ne", OutDType::boolean},
    OpInfo<BinaryOp>{BinaryOp::lt, "lt", OutDType::boolean},
    OpInfo<BinaryOp>{BinaryOp::le, "le", OutDType::boolean},
    OpInfo<BinaryOp>{BinaryOp::gt, "gt", OutDType::boolean},
    OpInfo<BinaryOp>{BinaryOp::ge, "ge", OutDType::boolean},
    OpInfo<BinaryOp>{BinaryOp::logical_and, "logical_and", OutDType::boolean},
    OpInfo<BinaryOp>{BinaryOp::logical_or, "logical_or", OutDType::boolean},
    OpInfo<BinaryOp>{BinaryOp::logical_xor, "logical_xor", OutDType::boolean},
    OpInfo<BinaryOp>{BinaryOp::relu_backward, "relu_backward"},
    OpInfo<BinaryOp>{BinaryOp::leaky_relu_backward, "leaky_relu_backward"},
    OpInfo<BinaryOp>{BinaryOp::gelu_backward, "gelu_backward"},
    OpInfo<BinaryOp>{BinaryOp::gelu_tanh_backward, "gelu_tanh_backward"},
    OpInfo<BinaryOp>{BinaryOp::silu_backward, "silu_backward"},
    OpInfo<BinaryOp>{BinaryOp::sign_mul, "sign_mul"},
    OpInfo<BinaryOp>{BinaryOp::swiglu, "swiglu"},
};

inline constexpr std::array kTernaryOps = {
    OpInfo<TernaryOp>{TernaryOp::where, "where"},
    OpInfo<TernaryOp>{TernaryOp::lerp, "lerp"},
    OpInfo<TernaryOp>{TernaryOp::addcmul, "addcmul"},
};

// Empty results follow PyTorch: sum 0, prod 1, logsumexp -inf, any false, all true; mean is
// 0 / 0; max / min / argmax / argmin of nothing are rejected by the op layer (NaN / 0 here).
inline constexpr std::array kReduceOps = {
    ReduceInfo{ReduceOp::sum, "sum", OutDType::same, 0.0},
    ReduceInfo{ReduceOp::mean, "mean", OutDType::same, kNaN},
    ReduceInfo{ReduceOp::prod, "prod", OutDType::same, 1.0},
    ReduceInfo{ReduceOp::max, "max", OutDType::same, kNaN},
    ReduceInfo{ReduceOp::min, "min", OutDType::same, kNaN},
    ReduceInfo{ReduceOp::argmax, "argmax", OutDType::int64, 0.0},
    ReduceInfo{ReduceOp::argmin, "argmin", OutDType::int64, 0.0},
    ReduceInfo{ReduceOp::sum_squares, "sum_squares", OutDType::same, 0.0},
    ReduceInfo{ReduceOp::logsumexp, "logsumexp", OutDType::same, -kInf},
    ReduceInfo{ReduceOp::any, "any", OutDType::boolean, 0.0},
    ReduceInfo{ReduceOp::all, "all", OutDType::boolean, 1.0},
};
// clang-format on

namespace detail {
// Row i describes enumerator i: the table is indexed by the enum's value.
template <typename Table>
constexpr bool rows_in_enum_order(const Table& table) {
  for (size_t i = 0; i < table.size(); ++i) {
    if (static_cast<size_t>(table[i].op) != i) return false;
  }
  return true;
}
}  // namespace detail

static_assert(detail::rows_in_enum_order(kUnaryOps), "kUnaryOps rows must follow UnaryOp");
static_assert(detail::rows_in_enum_order(kBinaryOps), "kBinaryOps rows must follow BinaryOp");
static_assert(detail::rows_in_enum_order(kTernaryOps), "kTernaryOps rows must follow TernaryOp");
static_assert(detail::rows_in_enum_order(kReduceOps), "kReduceOps rows must follow ReduceOp");

constexpr const OpInfo<UnaryOp>& info(UnaryOp op) {
  return kUnaryOps[static_cast<size_t>(op)];
}
constexpr const OpInfo<BinaryOp>& info(BinaryOp op) {
  return kBinaryOps[static_cast<size_t>(op)];
}
constexpr const OpInfo<TernaryOp>& info(TernaryOp op) {
  return kTernaryOps[static_cast<size_t>(op)];
}
constexpr const ReduceInfo& info(ReduceOp op) {
  return kReduceOps[static_cast<size_t>(op)];
}

template <typename Op>
constexpr std::string_view op_name(Op op) {
  return info(op).name;
}

// True for ops that write bool: the kernels then compute a predicate of the inputs.
template <typename Op>
constexpr bool is_predicate(Op op) {
  return info(op).out == OutDType::boolean;
}

// The dtype the kernel writes when it computes in `input`.
template <typename Op>
constexpr DType output_dtype(Op op, DType input) {
  switch (info(op).out) {
    case OutDType::boolean:
      return DType::boolean;
    case OutDType::int64:
      return DType::i64;
    default:
      return input;
  }
}

constexpr double empty_reduction_value(ReduceOp op) {
  return info(op).empty_value;
}

}  // namespace gradus::backend::common
