// Harness table: unary math, scalar arithmetic, activations, binary arithmetic with broadcasting,
// comparisons, logic, where / lerp / addcmul / clamp.
#include "ops/harness.h"

namespace gradus::harness {
namespace {

using L = Layout;

struct Unary {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double lo, hi;  // input domain (away from poles, kinks the gradcheck would straddle, ...)
  bool ints;      // also run on i32 / i64 inputs
};

// Each unary op on: a 3-D contiguous input, a transposed one, a strided one (offset, step 2), a
// stride-0 expanded one, an empty one and a 0-d one.
void add_unary(std::vector<OpCase>& out, const Unary& u) {
  const std::vector<DType> dtypes = u.ints ? kFloatInt : kFloat;
  auto fn = u.fn;
  auto body = [fn](const Inputs& x) { return fn(x[0]); };
  const std::string n = u.name;
  out.push_back(op(n + "_contig", {range({2, 3, 4}, u.lo, u.hi)}, body, dtypes));
  out.push_back(op(n + "_transposed", {range({5, 4}, u.lo, u.hi, L::transposed)}, body, dtypes));
  out.push_back(op(n + "_strided", {range({3, 4}, u.lo, u.hi, L::strided)}, body, dtypes));
  // The gradient of the expanded base sums 3 per-element gradients, each rounded to the
  // low-precision dtype first; for reciprocal, rsqrt, log... they reach 25 and can cancel.
  out.push_back(
      op(n + "_expanded", {range({3, 4}, u.lo, u.hi, L::expanded)}, body, dtypes).tolerance(1, 4));
  out.push_back(op(n + "_empty", {range({0, 3}, u.lo, u.hi)}, body, dtypes));
  out.push_back(op(n + "_scalar", {range({}, u.lo, u.hi)}, body, dtypes));
}

struct Binary {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  double alo, ahi, blo, bhi;
  bool ints;
};

// Each binary op on: equal shapes, two-sided broadcasting, a trailing-dims broadcast, a 0-d
// operand, non-contiguous operands (transposed with strided), an expanded operand, empty.
void add_binary(std::vector<OpCase>& out, const Binary& b) {
  const std::vector<DType> dtypes = b.ints ? kFloatInt : kFloat;
  auto fn = b.fn;
  auto body = [fn](const Inputs& x) { return fn(x[0], x[1]); };
  const std::string n = b.name;
  auto A = [&](Shape s, L l = L::contiguous) { return range(std::move(s), b.alo, b.ahi, l); };
  auto B = [&](Shape s, L l = L::contiguous) { return range(std::move(s), b.blo, b.bhi, l); };
  out.push_back(op(n + "_same", {A({3, 4}), B({3, 4})}, body, dtypes));
  out.push_back(op(n + "_bcast", {A({3, 1, 5}), B({4, 1})}, body, dtypes));
  out.push_back(op(n + "_bcast_trailing", {A({2, 3, 4}), B({4})}, body, dtypes));
  out.push_back(op(n + "_scalar_rhs", {A({3, 4}), B({})}, body, dtypes));
  out.push_back(op(n + "_scalar_lhs", {A({}), B({2, 3})}, body, dtypes));
  out.push_back(
      op(n + "_noncontig", {A({4, 5}, L::transposed), B({4, 5}, L::strided)}, body, dtypes));
  out.push_back(
      op(n + "_expanded", {A({3, 4}, L::expanded), B({3, 4}, L::transposed)}, body, dtypes));
  out.push_back(op(n + "_empty", {A({0, 4}), B({4})}, body, dtypes));
}

Tensor leaky(const Tensor& x) {
  return leaky_relu(x, 0.2);
}
Tensor gelu_tanh(const Tensor& x) {
  return gelu(x, GeluApproximation::tanh);
}
Tensor softplus_default(const Tensor& x) {
  return softplus(x);
}
Tensor softplus_beta(const Tensor& x) {
  return softplus(x, 2.0, 3.0);
}
Tensor clamp_both(const Tensor& x) {
  return clamp(x, -0.5, 0.5);
}
// Bounds exactly representable in f16 and bf16: the float64 reference compares the rounded inputs
// with the same bound the kernel uses.
Tensor clamp_min(const Tensor& x) {
  return clamp(x, -0.375, std::nullopt);
}
Tensor clamp_max(const Tensor& x) {
  return clamp(x, std::nullopt, 0.4375);
}
Tensor pow_frac(const Tensor& x) {
  return pow(x, 2.5);
}
Tensor pow_cube(const Tensor& x) {
  return pow(x, 3.0);
}
Tensor pow_neg(const Tensor& x) {
  return pow(x, -1.5);
}
Tensor rpow(const Tensor& x) {
  return pow(2.0, x);
}
Tensor add_s(const Tensor& x) {
  return add(x, 2.0);
}
Tensor add_frac(const Tensor& x) {
  return x + 0.25;
}
Tensor sub_s(const Tensor& x) {
  return sub(x, 0.75);
}
Tensor mul_s(const Tensor& x) {
  return mul(x, 3.0);
}
Tensor div_s(const Tensor& x) {
  return div(x, 3.0);
}
Tensor rsub(const Tensor& x) {
  return 1.5 - x;
}
Tensor rdiv(const Tensor& x) {
  return 2.0 / x;
}
Tensor rmul(const Tensor& x) {
  return -0.5 * x;
}
Tensor negate(const Tensor& x) {
  return -x;
}
Tensor neg_fn(const Tensor& x) {
  return neg(x);
}
Tensor abs_fn(const Tensor& x) {
  return abs(x);
}
Tensor sign_fn(const Tensor& x) {
  return sign(x);
}
Tensor exp_fn(const Tensor& x) {
  return exp(x);
}
Tensor log_fn(const Tensor& x) {
  return log(x);
}
Tensor log1p_fn(const Tensor& x) {
  return log1p(x);
}
Tensor expm1_fn(const Tensor& x) {
  return expm1(x);
}
Tensor sqrt_fn(const Tensor& x) {
  return sqrt(x);
}
Tensor rsqrt_fn(const Tensor& x) {
  return rsqrt(x);
}
Tensor reciprocal_fn(const Tensor& x) {
  return reciprocal(x);
}
Tensor square_fn(const Tensor& x) {
  return square(x);
}
Tensor sin_fn(const Tensor& x) {
  return sin(x);
}
Tensor cos_fn(const Tensor& x) {
  return cos(x);
}
Tensor erf_fn(const Tensor& x) {
  return erf(x);
}
Tensor floor_fn(const Tensor& x) {
  return floor(x);
}
Tensor ceil_fn(const Tensor& x) {
  return ceil(x);
}
Tensor round_fn(const Tensor& x) {
  return round(x);
}
Tensor relu_fn(const Tensor& x) {
  return relu(x);
}
Tensor gelu_fn(const Tensor& x) {
  return gelu(x);
}
Tensor silu_fn(const Tensor& x) {
  return silu(x);
}
Tensor sigmoid_fn(const Tensor& x) {
  return sigmoid(x);
}
Tensor tanh_fn(const Tensor& x) {
  return tanh(x);
}

Tensor add_fn(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor add_alpha(const Tensor& a, const Tensor& b) {
  return add(a, b, 0.5);
}
Tensor sub_fn(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor sub_alpha(const Tensor& a, const Tensor& b) {
  return sub(a, b, 2.0);
}
Tensor mul_fn(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor div_fn(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor pow_fn(const Tensor& a, const Tensor& b) {
  return pow(a, b);
}
Tensor maximum_fn(const Tensor& a, const Tensor& b) {
  return maximum(a, b);
}
Tensor minimum_fn(const Tensor& a, const Tensor& b) {
  return minimum(a, b);
}
Tensor atan2_fn(const Tensor& a, const Tensor& b) {
  return atan2(a, b);
}
Tensor fmod_fn(const Tensor& a, const Tensor& b) {
  return fmod(a, b);
}
Tensor remainder_fn(const Tensor& a, const Tensor& b) {
  return remainder(a, b);
}
Tensor plus_op(const Tensor& a, const Tensor& b) {
  return a + b;
}
Tensor minus_op(const Tensor& a, const Tensor& b) {
  return a - b;
}
Tensor times_op(const Tensor& a, const Tensor& b) {
  return a * b;
}
Tensor over_op(const Tensor& a, const Tensor& b) {
  return a / b;
}

}  // namespace

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> c;
  // Domains keep inputs off poles (log, rsqrt, reciprocal) and where derivatives explode.
  const Unary unary[] = {
      {"neg", neg_fn, -1, 1, true},
      {"unary_minus", negate, -1, 1, true},
      {"abs", abs_fn, -1, 1, true},
      {"sign", sign_fn, -1, 1, true},
      {"exp", exp_fn, -2, 2, false},
      {"log", log_fn, 0.1, 3, false},
      {"log1p", log1p_fn, -0.5, 2, false},
      {"expm1", expm1_fn, -1, 1, false},
      {"sqrt", sqrt_fn, 0.1, 3, false},
      {"rsqrt", rsqrt_fn, 0.1, 3, false},
      {"reciprocal", reciprocal_fn, 0.2, 2, false},
      {"square", square_fn, -1, 1, true},
      {"sin", sin_fn, -3, 3, false},
      {"cos", cos_fn, -3, 3, false},
      {"erf", erf_fn, -2, 2, false},
      {"floor", floor_fn, -3, 3, false},
      {"ceil", ceil_fn, -3, 3, false},
      {"round", round_fn, -3, 3, false},
      {"relu", relu_fn, -1, 1, false},
      {"leaky_relu", leaky, -1, 1, false},
      {"gelu", gelu_fn, -3, 3, false},
      {"gelu_tanh", gelu_tanh, -3, 3, false},
      {"silu", silu_fn, -3, 3, false},
      {"sigmoid", sigmoid_fn, -4, 4, false},
      {"tanh", tanh_fn, -2, 2, false},
      {"softplus", softplus_default, -3, 3, false},
      {"softplus_beta_threshold", softplus_beta, -3, 3, false},
      {"clamp", clamp_both, -1, 1, false},
      {"clamp_min", clamp_min, -1, 1, false},
      {"clamp_max", clamp_max, -1, 1, false},
      {"pow_scalar_frac", pow_frac, 0.1, 2, false},
      {"pow_scalar_cube", pow_cube, -1, 1, false},
      {"pow_scalar_neg", pow_neg, 0.5, 2, false},
      {"rpow_scalar", rpow, -2, 2, false},
      {"add_scalar", add_s, -1, 1, true},
      {"add_scalar_frac", add_frac, -1, 1, false},
      {"sub_scalar", sub_s, -1, 1, false},
      {"mul_scalar", mul_s, -1, 1, true},
      {"div_scalar", div_s, -1, 1, false},
      {"rsub_scalar", rsub, -1, 1, false},
      {"rdiv_scalar", rdiv, 0.5, 2, false},
      {"rmul_scalar", rmul, -1, 1, false},
  };
  for (const Unary& u : unary) add_unary(c, u);

  const Binary binary[] = {
      {"add", add_fn, -1, 1, -1, 1, true},
      {"add_alpha", add_alpha, -1, 1, -1, 1, false},
      {"sub", sub_fn, -1, 1, -1, 1, true},
      {"sub_alpha", sub_alpha, -1, 1, -1, 1, false},
      {"mul", mul_fn, -1, 1, -1, 1, true},
      {"div", div_fn, -1, 1, 0.5, 1.5, false},
      {"pow", pow_fn, 0.5, 2, -1.5, 1.5, false},
      {"maximum", maximum_fn, -1, 1, -1, 1, true},
      {"minimum", minimum_fn, -1, 1, -1, 1, true},
      {"atan2", atan2_fn, -1, 1, 0.2, 1, false},
      {"fmod", fmod_fn, -3, 3, 0.5, 1.5, true},
      {"remainder", remainder_fn, -3, 3, 0.5, 1.5, true},
      {"operator_plus", plus_op, -1, 1, -1, 1, false},
      {"operator_minus", minus_op, -1, 1, -1, 1, false},
      {"operator_times", times_op, -1, 1, -1, 1, false},
      {"operator_div", over_op, -1, 1, 0.5, 1.5, false},
  };
  for (const Binary& b : binary) {
    const size_t first = c.size();
    add_binary(c, b);
    // d/db of fmod and remainder is -trunc(a/b) / -floor(a/b): it jumps by 1 where a/b crosses an
    // integer, and a/b rounded to 8 or 11 bits crosses it early. Gradients in f32/f64 only.
    if (b.name == std::string("fmod") || b.name == std::string("remainder")) {
      for (size_t i = first; i < c.size(); ++i) c[i].no_half_grads();
    }
  }
  // A negative divisor: fmod follows the dividend's sign, remainder the divisor's.
  c.push_back(op(
                  "fmod_neg_divisor", {range({3, 4}, -3, 3), range({4}, -1.5, -0.5)},
                  [](const Inputs& x) { return fmod(x[0], x[1]); }, kFloatInt)
                  .no_half_grads());
  c.push_back(op(
                  "remainder_neg_divisor", {range({3, 4}, -3, 3), range({4}, -1.5, -0.5)},
                  [](const Inputs& x) { return remainder(x[0], x[1]); }, kFloatInt)
                  .no_half_grads());
  // atan2 in all four quadrants (the gradcheck never straddles the branch cut: P ~ 1e-6).
  c.push_back(op("atan2_quadrants", {f({4, 5}), f({4, 5})},
                 [](const Inputs& x) { return atan2(x[0], x[1]); }));

  // Comparisons: "ties" inputs are multiples of 0.5 so equal values occur.
  using Cmp = Tensor (*)(const Tensor&, const Tensor&);
  using CmpS = Tensor (*)(const Tensor&, double);
  const std::pair<const char*, Cmp> cmps[] = {{"eq", eq}, {"ne", ne}, {"lt", lt},
                                              {"le", le}, {"gt", gt}, {"ge", ge}};
  const std::pair<const char*, CmpS> cmps_s[] = {{"eq", eq}, {"ne", ne}, {"lt", lt},
                                                 {"le", le}, {"gt", gt}, {"ge", ge}};
  for (const auto& [name, fn] : cmps) {
    c.push_back(op(
                    std::string(name) + "_bcast", {ties({3, 4}), ties({4})},
                    [fn](const Inputs& x) { return fn(x[0], x[1]); }, kFloatInt)
                    .nondiff());
    c.push_back(op(
                    std::string(name) + "_noncontig",
                    {{{4, 3}, L::transposed, -2, 2, Kind::ties, false}, ties({4, 3})},
                    [fn](const Inputs& x) { return fn(x[0], x[1]); }, kFloatInt)
                    .nondiff());
  }
  for (const auto& [name, fn] : cmps_s) {
    c.push_back(op(
                    std::string(name) + "_scalar", {ties({3, 4})},
                    [fn](const Inputs& x) { return fn(x[0], 0.5); }, kFloatInt)
                    .nondiff());
  }
  // Logic on bool inputs (the dtype list is irrelevant: one run).
  const std::vector<DType> one = {DType::f32};
  c.push_back(op(
                  "logical_and", {mask({3, 4}), mask({4})},
                  [](const Inputs& x) { return logical_and(x[0], x[1]); }, one)
                  .nondiff());
  c.push_back(op(
                  "logical_or", {mask({3, 4}), mask({3, 1})},
                  [](const Inputs& x) { return logical_or(x[0], x[1]); }, one)
                  .nondiff());
  c.push_back(op(
                  "logical_xor", {mask({3, 4}), mask({3, 4})},
                  [](const Inputs& x) { return logical_xor(x[0], x[1]); }, one)
                  .nondiff());
  c.push_back(
      op(
          "logical_not", {mask({2, 5})}, [](const Inputs& x) { return logical_not(x[0]); }, one)
          .nondiff());
  c.push_back(op("logical_and_float", {ties({3, 4}), ties({3, 4})}, [](const Inputs& x) {
                return logical_and(x[0], x[1]);
              }).nondiff());
  c.push_back(
      op("isnan", {special({4, 5})}, [](const Inputs& x) { return isnan(x[0]); }).nondiff());
  c.push_back(
      op("isinf", {special({4, 5})}, [](const Inputs& x) { return isinf(x[0]); }).nondiff());
  c.push_back(
      op("isfinite", {special({4, 5})}, [](const Inputs& x) { return isfinite(x[0]); }).nondiff());
  // NaN and infinities through arithmetic must propagate like IEEE says.
  c.push_back(op("special_values_arith", {special({4, 5}), f({5})}, [](const Inputs& x) {
                return add(mul(x[0], 2.0), x[1]);
              }).nondiff());

  // where / lerp / addcmul
  c.push_back(op(
      "where", {mask({3, 4}), f({3, 4}), f({3, 4})},
      [](const Inputs& x) { return where(x[0], x[1], x[2]); }, kFloatInt));
  c.push_back(op(
      "where_bcast", {mask({3, 1}), f({3, 4}, L::transposed), f({4})},
      [](const Inputs& x) { return where(x[0], x[1], x[2]); }, kFloatInt));
  c.push_back(op("where_scalar", {mask({2, 3, 4}), f({2, 3, 4}, L::strided)},
                 [](const Inputs& x) { return where(x[0], x[1], 0.5); }));
  c.push_back(op("where_empty", {mask({0, 4}), f({0, 4}), f({4})},
                 [](const Inputs& x) { return where(x[0], x[1], x[2]); }));
  c.push_back(op("lerp", {f({3, 4}), f({3, 4}), range({3, 4}, 0, 1)},
                 [](const Inputs& x) { return lerp(x[0], x[1], x[2]); }));
  c.push_back(op("lerp_bcast", {f({3, 4}, L::transposed), f({4}), range({3, 1}, 0, 1)},
                 [](const Inputs& x) { return lerp(x[0], x[1], x[2]); }));
  c.push_back(op("addcmul", {f({3, 4}), f({3, 4}), f({3, 4})},
                 [](const Inputs& x) { return addcmul(x[0], x[1], x[2], 0.5); }));
  c.push_back(op("addcmul_bcast", {f({2, 3, 4}), f({3, 1}), f({4}, L::strided)},
                 [](const Inputs& x) { return addcmul(x[0], x[1], x[2], -2.0); }));
  c.push_back(op("addcmul_default", {f({5}), f({5}), f({5})},
                 [](const Inputs& x) { return addcmul(x[0], x[1], x[2]); }));
  // The fused SwiGLU: the gate over silu's kinked region, up of both signs; strided inputs as a
  // model's column-parallel halves are.
  c.push_back(op("swiglu", {range({3, 8}, -4, 4), f({3, 8})},
                 [](const Inputs& x) { return swiglu(x[0], x[1]); }));
  c.push_back(op("swiglu_noncontig", {range({6, 5}, -4, 4, L::transposed), f({6, 5}, L::strided)},
                 [](const Inputs& x) { return swiglu(x[0], x[1]); }));
  return c;
}

}  // namespace gradus::harness
