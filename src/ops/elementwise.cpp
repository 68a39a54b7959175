// Arithmetic, comparison, logic and math ops: forward through the backend's unary / binary /
// ternary kernels, backward written with ops.
#include <cmath>
#include <numbers>

#include "ops/autocast.h"
#include "ops/common.h"

namespace gradus {
namespace ops {
namespace {

using backend::BinaryOp;
using backend::TernaryOp;
using backend::UnaryOp;

// Runs a binary kernel on a and b broadcast together, computed in `compute` dtype.
Tensor binary_kernel(BinaryOp op, const char* name, const Tensor& a, const Tensor& b, double alpha,
                     DType compute, DType out_dtype) {
  check_defined(name, {&a, &b});
  check_same_device(name, {&a, &b});
  const Shape shape = broadcast_shapes(a.sizes(), b.sizes(), name);
  Tensor out = new_empty(shape, out_dtype, a.device());
  if (out.numel() == 0) return out;
  backend_of(a).binary(op, broadcast_raw(cast_raw(a, compute), shape),
                       broadcast_raw(cast_raw(b, compute), shape), out, alpha);
  return out;
}

DType arithmetic_dtype(const Tensor& a, const Tensor& b) {
  return promote_types(a.dtype(), b.dtype());
}

// Division and transcendental functions of integer inputs produce float32, like PyTorch.
DType float_dtype(DType t) {
  return is_floating(t) ? t : DType::f32;
}

Tensor unary_kernel(UnaryOp op, const char* name, const Tensor& x, double a = 0, double b = 0,
                    DType compute_dtype_override = DType::boolean, bool bool_out = false) {
  check_defined(name, {&x});
  const DType compute =
      compute_dtype_override == DType::boolean ? x.dtype() : compute_dtype_override;
  Tensor out = new_empty(x.sizes(), bool_out ? DType::boolean : compute, x.device());
  if (out.numel() == 0) return out;
  backend_of(x).unary(op, cast_raw(x, compute), out, a, b);
  return out;
}

// A unary op of a floating result: integer inputs are computed in float32.
Tensor float_unary(UnaryOp op, const char* name, const Tensor& x, double a = 0, double b = 0) {
  return unary_kernel(op, name, x, a, b, float_dtype(x.dtype()));
}

Tensor comparison(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  return binary_kernel(op, name, a, b, 0, arithmetic_dtype(a, b), DType::boolean);
}

// A 0-d tensor holding a Python-style scalar operand for t. Like PyTorch, a fractional scalar
// against an integer tensor promotes the operation to float32 (t == 0.5 is false for ints).
Tensor scalar_like(double v, const Tensor& t) {
  const bool fractional = v != std::trunc(v) || !std::isfinite(v);
  const DType dtype = is_integral(t.dtype()) && fractional ? DType::f32 : t.dtype();
  return scalar_tensor(v, {dtype, t.device()});
}

}  // namespace
}  // namespace ops

using namespace ops;

// ------------------------------------------------------------------------------- arithmetic
Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  GRADUS_PROFILE_OP("add");
  Tensor out = binary_kernel(BinaryOp::add, "add", a, b, alpha, arithmetic_dtype(a, b),
                             arithmetic_dtype(a, b));
  return record(
      "add", out, {a, b},
      [ma = InputMeta(a), mb = InputMeta(b), alpha](const TensorList& g, const NeedsGrad& needs) {
        return TensorList{
            needs[0] ? reduce_grad(g[0], ma) : Tensor(),
            needs[1] ? reduce_grad(alpha == 1.0 ? g[0] : mul(g[0], alpha), mb) : Tensor()};
      });
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  GRADUS_PROFILE_OP("sub");
  Tensor out = binary_kernel(BinaryOp::sub, "sub", a, b, alpha, arithmetic_dtype(a, b),
                             arithmetic_dtype(a, b));
  return record(
      "sub", out, {a, b},
      [ma = InputMeta(a), mb = InputMeta(b), alpha](const TensorList& g, const NeedsGrad& needs) {
        return TensorList{needs[0] ? reduce_grad(g[0], ma) : Tensor(),
                          needs[1] ? reduce_grad(mul(g[0], -alpha), mb) : Tensor()};
      });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("mul");
  Tensor out =
      binary_kernel(BinaryOp::mul, "mul", a, b, 0, arithmetic_dtype(a, b), arithmetic_dtype(a, b));
  return record("mul", out, {a, b},
                [ma = InputMeta(a), mb = InputMeta(b), sa = SavedTensor(a), sb = SavedTensor(b)](
                    const TensorList& g, const NeedsGrad& needs) {
                  return TensorList{needs[0] ? reduce_grad(mul(g[0], sb.get()), ma) : Tensor(),
                                    needs[1] ? reduce_grad(mul(g[0], sa.get()), mb) : Tensor()};
                });
}

Tensor div(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("div");
  const DType t = float_dtype(arithmetic_dtype(a, b));
  Tensor out = binary_kernel(BinaryOp::div, "div", a, b, 0, t, t);
  return record(
      "div", out, {a, b},
      [ma = InputMeta(a), mb = InputMeta(b), sa = SavedTensor(a), sb = SavedTensor(b)](
          const TensorList& g, const NeedsGrad& needs) {
        Tensor bv = sb.get();
        return TensorList{
            needs[0] ? reduce_grad(div(g[0], bv), ma) : Tensor(),
            needs[1] ? reduce_grad(neg(div(mul(g[0], sa.get()), mul(bv, bv))), mb) : Tensor()};
      });
}

namespace {
// out = scale * x + shift, keeping x's dtype unless x is integral and the scalars are not.
Tensor affine(const char* name, const Tensor& x, double scale, double shift) {
  check_defined(name, {&x});
  const bool integral_scalars = scale == std::trunc(scale) && shift == std::trunc(shift);
  const DType t = is_floating(x.dtype()) || integral_scalars ? x.dtype() : DType::f32;
  Tensor out = unary_kernel(UnaryOp::affine, name, x, scale, shift, t);
  return record(name, out, {x}, [mx = InputMeta(x), scale](const TensorList& g, const NeedsGrad&) {
    return TensorList{reduce_grad(scale == 1.0 ? g[0] : mul(g[0], scale), mx)};
  });
}
}  // namespace

Tensor add(const Tensor& a, double b) {
  GRADUS_PROFILE_OP("add");
  return affine("add", a, 1.0, b);
}
Tensor sub(const Tensor& a, double b) {
  GRADUS_PROFILE_OP("sub");
  return affine("sub", a, 1.0, -b);
}
Tensor mul(const Tensor& a, double b) {
  GRADUS_PROFILE_OP("mul");
  return affine("mul", a, b, 0.0);
}
Tensor div(const Tensor& a, double b) {
  GRADUS_PROFILE_OP("div");
  check_defined("div", {&a});
  if (!is_floating(a.dtype())) return div(a.to(DType::f32), b);
  return affine("div", a, 1.0 / b, 0.0);
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator+(const Tensor& a, double b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, double b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, double b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, double b) {
  return div(a, b);
}
Tensor operator+(double a, const Tensor& b) {
  return add(b, a);
}
Tensor operator-(double a, const Tensor& b) {
  GRADUS_PROFILE_OP("rsub");
  return affine("rsub", b, -1.0, a);
}
Tensor operator*(double a, const Tensor& b) {
  return mul(b, a);
}
Tensor operator/(double a, const Tensor& b) {
  return mul(reciprocal(b), a);
}
Tensor operator-(const Tensor& a) {
  return neg(a);
}

Tensor pow(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("pow");
  if (AutocastInputs cast{"pow", {&a, &b}}) return pow(cast[0], cast[1]);
  const DType t = arithmetic_dtype(a, b);
  Tensor out = binary_kernel(BinaryOp::pow, "pow", a, b, 0, t, t);
  return record("pow", out, {a, b},
                [ma = InputMeta(a), mb = InputMeta(b), sa = SavedTensor(a), sb = SavedTensor(b),
                 so = SavedTensor(out)](const TensorList& g, const NeedsGrad& needs) {
                  Tensor av = sa.get(), bv = sb.get();
                  Tensor ga, gb;
                  if (needs[0]) {
                    // b a^(b-1), and exactly 0 where b == 0 (at a == 0 the formula is 0 * inf).
                    Tensor d = mul(bv, pow(av, sub(bv, 1.0)));
                    ga = reduce_grad(mul(g[0], where(eq(bv, 0.0), zeros_like(d), d)), ma);
                  }
                  if (needs[1]) {
                    // d/db a^b = a^b log a; defined as 0 where a == 0 (PyTorch's convention).
                    Tensor d = mul(so.get(), log(av));
                    gb = reduce_grad(mul(g[0], where(eq(av, 0.0), zeros_like(d), d)), mb);
                  }
                  return TensorList{ga, gb};
                });
}

Tensor pow(const Tensor& a, double exponent) {
  GRADUS_PROFILE_OP("pow");
  if (AutocastInputs cast{"pow", {&a}}) return pow(cast[0], exponent);
  Tensor out = exponent == 2.0 && is_floating(a.dtype())
                   ? unary_kernel(UnaryOp::square, "pow", a)
                   : float_unary(UnaryOp::pow_scalar, "pow", a, exponent);
  return record(
      "pow", out, {a},
      [ma = InputMeta(a), sa = SavedTensor(a), exponent](const TensorList& g, const NeedsGrad&) {
        // x^0 is constant: its gradient is 0 everywhere (the formula would give 0 * inf at 0).
        Tensor d = exponent == 0.0   ? zeros_like(sa.get())
                   : exponent == 2.0 ? mul(sa.get(), 2.0)
                                     : mul(pow(sa.get(), exponent - 1.0), exponent);
        return TensorList{reduce_grad(mul(g[0], d), ma)};
      });
}

Tensor pow(double base, const Tensor& exponent) {
  GRADUS_PROFILE_OP("pow");
  if (AutocastInputs cast{"pow", {&exponent}}) return pow(base, cast[0]);
  Tensor out = float_unary(UnaryOp::rpow_scalar, "pow", exponent, base);
  return record("pow", out, {exponent},
                [me = InputMeta(exponent), so = SavedTensor(out), base](const TensorList& g,
                                                                        const NeedsGrad&) {
                  return TensorList{reduce_grad(mul(g[0], mul(so.get(), std::log(base))), me)};
                });
}

namespace {
// maximum / minimum: the gradient goes to the selected input, split evenly on ties.
Tensor extremum(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  const DType t = arithmetic_dtype(a, b);
  Tensor out = binary_kernel(op, name, a, b, 0, t, t);
  const bool is_max = op == BinaryOp::maximum;
  return record(name, out, {a, b},
                [ma = InputMeta(a), mb = InputMeta(b), sa = SavedTensor(a), sb = SavedTensor(b),
                 is_max](const TensorList& g, const NeedsGrad& needs) {
                  Tensor av = sa.get(), bv = sb.get();
                  Tensor a_wins = is_max ? gt(av, bv) : lt(av, bv);
                  Tensor tie = eq(av, bv);
                  Tensor half = mul(g[0], 0.5);
                  Tensor zero = zeros_like(g[0]);
                  Tensor ga, gb;
                  if (needs[0]) ga = reduce_grad(where(a_wins, g[0], where(tie, half, zero)), ma);
                  if (needs[1]) {
                    Tensor b_wins = logical_not(logical_or(a_wins, tie));
                    gb = reduce_grad(where(b_wins, g[0], where(tie, half, zero)), mb);
                  }
                  return TensorList{ga, gb};
                });
}

Tensor trunc_div(const Tensor& a, const Tensor& b, bool floor_mode) {
  Tensor q = div(a, b);
  return floor_mode ? floor(q) : where(ge(q, 0.0), floor(q), ceil(q));
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("maximum");
  return extremum(BinaryOp::maximum, "maximum", a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("minimum");
  return extremum(BinaryOp::minimum, "minimum", a, b);
}

Tensor atan2(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("atan2");
  const DType t = float_dtype(arithmetic_dtype(a, b));
  Tensor out = binary_kernel(BinaryOp::atan2, "atan2", a, b, 0, t, t);
  return record("atan2", out, {a, b},
                [ma = InputMeta(a), mb = InputMeta(b), sa = SavedTensor(a), sb = SavedTensor(b)](
                    const TensorList& g, const NeedsGrad& needs) {
                  Tensor av = sa.get(), bv = sb.get();
                  Tensor denom = add(mul(av, av), mul(bv, bv));
                  return TensorList{
                      needs[0] ? reduce_grad(div(mul(g[0], bv), denom), ma) : Tensor(),
                      needs[1] ? reduce_grad(neg(div(mul(g[0], av), denom)), mb) : Tensor()};
                });
}

Tensor fmod(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("fmod");
  const DType t = arithmetic_dtype(a, b);
  Tensor out = binary_kernel(BinaryOp::fmod, "fmod", a, b, 0, t, t);
  return record("fmod", out, {a, b},
                [ma = InputMeta(a), mb = InputMeta(b), sa = SavedTensor(a), sb = SavedTensor(b)](
                    const TensorList& g, const NeedsGrad& needs) {
                  return TensorList{
                      needs[0] ? reduce_grad(g[0], ma) : Tensor(),
                      needs[1]
                          ? reduce_grad(neg(mul(g[0], trunc_div(sa.get(), sb.get(), false))), mb)
                          : Tensor()};
                });
}

Tensor remainder(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("remainder");
  const DType t = arithmetic_dtype(a, b);
  Tensor out = binary_kernel(BinaryOp::remainder, "remainder", a, b, 0, t, t);
  return record("remainder", out, {a, b},
                [ma = InputMeta(a), mb = InputMeta(b), sa = SavedTensor(a), sb = SavedTensor(b)](
                    const TensorList& g, const NeedsGrad& needs) {
                  return TensorList{
                      needs[0] ? reduce_grad(g[0], ma) : Tensor(),
                      needs[1]
                          ? reduce_grad(neg(mul(g[0], trunc_div(sa.get(), sb.get(), true))), mb)
                          : Tensor()};
                });
}

// ------------------------------------------------------------------------- comparisons, logic
Tensor eq(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("eq");
  return comparison(BinaryOp::eq, "eq", a, b);
}
Tensor ne(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("ne");
  return comparison(BinaryOp::ne, "ne", a, b);
}
Tensor lt(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("lt");
  return comparison(BinaryOp::lt, "lt", a, b);
}
Tensor le(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("le");
  return comparison(BinaryOp::le, "le", a, b);
}
Tensor gt(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("gt");
  return comparison(BinaryOp::gt, "gt", a, b);
}
Tensor ge(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("ge");
  return comparison(BinaryOp::ge, "ge", a, b);
}
Tensor eq(const Tensor& a, double b) {
  return eq(a, scalar_like(b, a));
}
Tensor ne(const Tensor& a, double b) {
  return ne(a, scalar_like(b, a));
}
Tensor lt(const Tensor& a, double b) {
  return lt(a, scalar_like(b, a));
}
Tensor le(const Tensor& a, double b) {
  return le(a, scalar_like(b, a));
}
Tensor gt(const Tensor& a, double b) {
  return gt(a, scalar_like(b, a));
}
Tensor ge(const Tensor& a, double b) {
  return ge(a, scalar_like(b, a));
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("logical_and");
  return binary_kernel(BinaryOp::logical_and, "logical_and", a, b, 0, DType::boolean,
                       DType::boolean);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("logical_or");
  return binary_kernel(BinaryOp::logical_or, "logical_or", a, b, 0, DType::boolean, DType::boolean);
}
Tensor logical_xor(const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("logical_xor");
  return binary_kernel(BinaryOp::logical_xor, "logical_xor", a, b, 0, DType::boolean,
                       DType::boolean);
}
Tensor logical_not(const Tensor& a) {
  GRADUS_PROFILE_OP("logical_not");
  return unary_kernel(UnaryOp::logical_not, "logical_not", a, 0, 0, DType::boolean, true);
}
Tensor isnan(const Tensor& a) {
  GRADUS_PROFILE_OP("isnan");
  return unary_kernel(UnaryOp::isnan, "isnan", a, 0, 0, DType::boolean, true);
}
Tensor isinf(const Tensor& a) {
  GRADUS_PROFILE_OP("isinf");
  return unary_kernel(UnaryOp::isinf, "isinf", a, 0, 0, DType::boolean, true);
}
Tensor isfinite(const Tensor& a) {
  return logical_not(logical_or(isnan(a), isinf(a)));
}

// ------------------------------------------------------------------------------- unary math
namespace {
// A unary op whose gradient is g * dfdx(x, out).
template <typename Derivative>
Tensor unary_op(UnaryOp op, const char* name, const Tensor& x, Derivative dfdx, double a = 0,
                double b = 0) {
  // Autocast by the op's name: exp, log, rsqrt, ... are in its float32 list.
  if (AutocastInputs cast{name, {&x}}) return unary_op(op, name, cast[0], dfdx, a, b);
  Tensor out = float_unary(op, name, x, a, b);
  return record(name, out, {x},
                [mx = InputMeta(x), sx = SavedTensor(x), so = SavedTensor(out), dfdx](
                    const TensorList& g, const NeedsGrad&) {
                  return TensorList{reduce_grad(dfdx(g[0], sx, so), mx)};
                });
}
// Piecewise-constant ops (floor, sign, ...) have zero gradient almost everywhere.
Tensor unary_flat(UnaryOp op, const char* name, const Tensor& x) {
  Tensor out = unary_kernel(op, name, x);
  return record(name, out, {x}, [mx = InputMeta(x)](const TensorList& g, const NeedsGrad&) {
    return TensorList{reduce_grad(zeros_like(g[0]), mx)};
  });
}
using S = const SavedTensor&;
}  // namespace

Tensor neg(const Tensor& x) {
  GRADUS_PROFILE_OP("neg");
  Tensor out = unary_kernel(UnaryOp::neg, "neg", x);
  return record("neg", out, {x},
                [](const TensorList& g, const NeedsGrad&) { return TensorList{neg(g[0])}; });
}

Tensor abs(const Tensor& x) {
  GRADUS_PROFILE_OP("abs");
  Tensor out = unary_kernel(UnaryOp::abs, "abs", x);
  return record("abs", out, {x}, [sx = SavedTensor(x)](const TensorList& g, const NeedsGrad&) {
    Tensor gx = new_empty(g[0].sizes(), g[0].dtype(), g[0].device());
    backend_of(gx).binary(BinaryOp::sign_mul, g[0], cast_raw(sx.get(), g[0].dtype()), gx, 0);
    return TensorList{gx};
  });
}

Tensor sign(const Tensor& x) {
  GRADUS_PROFILE_OP("sign");
  return unary_flat(UnaryOp::sign, "sign", x);
}
Tensor floor(const Tensor& x) {
  GRADUS_PROFILE_OP("floor");
  return unary_flat(UnaryOp::floor, "floor", x);
}
Tensor ceil(const Tensor& x) {
  GRADUS_PROFILE_OP("ceil");
  return unary_flat(UnaryOp::ceil, "ceil", x);
}
Tensor round(const Tensor& x) {
  GRADUS_PROFILE_OP("round");
  return unary_flat(UnaryOp::round, "round", x);
}

Tensor exp(const Tensor& x) {
  GRADUS_PROFILE_OP("exp");
  return unary_op(UnaryOp::exp, "exp", x, [](const Tensor& g, S, S o) { return mul(g, o.get()); });
}
Tensor log(const Tensor& x) {
  GRADUS_PROFILE_OP("log");
  return unary_op(UnaryOp::log, "log", x, [](const Tensor& g, S i, S) { return div(g, i.get()); });
}
Tensor log1p(const Tensor& x) {
  GRADUS_PROFILE_OP("log1p");
  return unary_op(UnaryOp::log1p, "log1p", x,
                  [](const Tensor& g, S i, S) { return div(g, add(i.get(), 1.0)); });
}
Tensor expm1(const Tensor& x) {
  GRADUS_PROFILE_OP("expm1");
  return unary_op(UnaryOp::expm1, "expm1", x,
                  [](const Tensor& g, S, S o) { return mul(g, add(o.get(), 1.0)); });
}
Tensor sqrt(const Tensor& x) {
  GRADUS_PROFILE_OP("sqrt");
  return unary_op(UnaryOp::sqrt, "sqrt", x,
                  [](const Tensor& g, S, S o) { return div(g, mul(o.get(), 2.0)); });
}
Tensor rsqrt(const Tensor& x) {
  GRADUS_PROFILE_OP("rsqrt");
  return unary_op(UnaryOp::rsqrt, "rsqrt", x, [](const Tensor& g, S, S o) {
    Tensor y = o.get();
    return mul(g, mul(mul(y, mul(y, y)), -0.5));
  });
}
Tensor reciprocal(const Tensor& x) {
  GRADUS_PROFILE_OP("reciprocal");
  return unary_op(UnaryOp::reciprocal, "reciprocal", x, [](const Tensor& g, S, S o) {
    Tensor y = o.get();
    return neg(mul(g, mul(y, y)));
  });
}
Tensor square(const Tensor& x) {
  GRADUS_PROFILE_OP("square");
  return unary_op(UnaryOp::square, "square", x,
                  [](const Tensor& g, S i, S) { return mul(g, mul(i.get(), 2.0)); });
}
Tensor sin(const Tensor& x) {
  GRADUS_PROFILE_OP("sin");
  return unary_op(UnaryOp::sin, "sin", x,
                  [](const Tensor& g, S i, S) { return mul(g, cos(i.get())); });
}
Tensor cos(const Tensor& x) {
  GRADUS_PROFILE_OP("cos");
  return unary_op(UnaryOp::cos, "cos", x,
                  [](const Tensor& g, S i, S) { return neg(mul(g, sin(i.get()))); });
}
Tensor erf(const Tensor& x) {
  GRADUS_PROFILE_OP("erf");
  return unary_op(UnaryOp::erf, "erf", x, [](const Tensor& g, S i, S) {
    Tensor xv = i.get();
    return mul(g, mul(exp(neg(mul(xv, xv))), 2.0 / std::sqrt(std::numbers::pi)));
  });
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  GRADUS_PROFILE_OP("clamp");
  const double lo = min ? *min : std::nan(""), hi = max ? *max : std::nan("");
  check_defined("clamp", {&x});
  GRADUS_CHECK(!(min && max) || *min <= *max, ValueError, "clamp: min (", *min,
               ") is greater than max (", *max, ")");
  Tensor out = unary_kernel(UnaryOp::clamp, "clamp", x, lo, hi);
  return record("clamp", out, {x},
                [sx = SavedTensor(x), min, max](const TensorList& g, const NeedsGrad&) {
                  Tensor xv = sx.get();
                  Tensor inside = ones_like(xv).to(DType::boolean);
                  if (min) inside = logical_and(inside, ge(xv, *min));
                  if (max) inside = logical_and(inside, le(xv, *max));
                  return TensorList{where(inside, g[0], zeros_like(g[0]))};
                });
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  GRADUS_PROFILE_OP("where");
  check_defined("where", {&condition, &a, &b});
  check_same_device("where", {&condition, &a, &b});
  GRADUS_CHECK(condition.dtype() == DType::boolean, DTypeError,
               "where: condition must be bool, got ", dtype_name(condition.dtype()));
  const Shape shape =
      broadcast_shapes(broadcast_shapes(condition.sizes(), a.sizes(), "where"), b.sizes(), "where");
  const DType t = arithmetic_dtype(a, b);
  Tensor out = new_empty(shape, t, a.device());
  if (out.numel() > 0) {
    backend_of(a).ternary(TernaryOp::where, broadcast_raw(condition, shape),
                          broadcast_raw(cast_raw(a, t), shape),
                          broadcast_raw(cast_raw(b, t), shape), out, 0);
  }
  return record("where", out, {a, b},
                [ma = InputMeta(a), mb = InputMeta(b), sc = SavedTensor(condition)](
                    const TensorList& g, const NeedsGrad& needs) {
                  Tensor zero = zeros_like(g[0]);
                  Tensor c = sc.get();
                  return TensorList{needs[0] ? reduce_grad(where(c, g[0], zero), ma) : Tensor(),
                                    needs[1] ? reduce_grad(where(c, zero, g[0]), mb) : Tensor()};
                });
}

Tensor where(const Tensor& condition, const Tensor& a, double b) {
  GRADUS_PROFILE_OP("where");
  check_defined("where", {&a});
  return where(condition, a, scalar_tensor(b, {a.dtype(), a.device()}));
}

namespace {
Tensor ternary_kernel(TernaryOp op, const char* name, const Tensor& a, const Tensor& b,
                      const Tensor& c, double alpha) {
  check_defined(name, {&a, &b, &c});
  check_same_device(name, {&a, &b, &c});
  const Shape shape =
      broadcast_shapes(broadcast_shapes(a.sizes(), b.sizes(), name), c.sizes(), name);
  const DType t = promote_types(arithmetic_dtype(a, b), c.dtype());
  Tensor out = new_empty(shape, t, a.device());
  if (out.numel() > 0) {
    backend_of(a).ternary(op, broadcast_raw(cast_raw(a, t), shape),
                          broadcast_raw(cast_raw(b, t), shape),
                          broadcast_raw(cast_raw(c, t), shape), out, alpha);
  }
  return out;
}
}  // namespace

Tensor lerp(const Tensor& a, const Tensor& b, const Tensor& weight) {
  GRADUS_PROFILE_OP("lerp");
  Tensor out = ternary_kernel(TernaryOp::lerp, "lerp", a, b, weight, 0);
  return record(
      "lerp", out, {a, b, weight},
      [ma = InputMeta(a), mb = InputMeta(b), mw = InputMeta(weight), sa = SavedTensor(a),
       sb = SavedTensor(b), sw = SavedTensor(weight)](const TensorList& g, const NeedsGrad& needs) {
        Tensor w = sw.get();
        return TensorList{
            needs[0] ? reduce_grad(mul(g[0], 1.0 - w), ma) : Tensor(),
            needs[1] ? reduce_grad(mul(g[0], w), mb) : Tensor(),
            needs[2] ? reduce_grad(mul(g[0], sub(sb.get(), sa.get())), mw) : Tensor()};
      });
}

Tensor addcmul(const Tensor& a, const Tensor& b, const Tensor& c, double value) {
  GRADUS_PROFILE_OP("addcmul");
  Tensor out = ternary_kernel(TernaryOp::addcmul, "addcmul", a, b, c, value);
  return record("addcmul", out, {a, b, c},
                [ma = InputMeta(a), mb = InputMeta(b), mc = InputMeta(c), sb = SavedTensor(b),
                 sc = SavedTensor(c), value](const TensorList& g, const NeedsGrad& needs) {
                  return TensorList{
                      needs[0] ? reduce_grad(g[0], ma) : Tensor(),
                      needs[1] ? reduce_grad(mul(mul(g[0], sc.get()), value), mb) : Tensor(),
                      needs[2] ? reduce_grad(mul(mul(g[0], sb.get()), value), mc) : Tensor()};
                });
}

}  // namespace gradus
