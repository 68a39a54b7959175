// CPU elementwise kernels against float64 references: every UnaryOp / BinaryOp / TernaryOp, in
// f32 / f64 / f16 / bf16, contiguous, strided (transposed) and broadcast (stride 0) layouts.
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>

#include "backend_test_util.h"

namespace gradus::backend_test {
namespace {

using backend::BinaryOp;
using backend::TernaryOp;
using backend::UnaryOp;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

double ref_sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
double ref_gelu(double x) {
  return 0.5 * x * std::erfc(-x / std::numbers::sqrt2);
}
double ref_gelu_tanh(double x) {
  const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}
double ref_gelu_grad(double x) {
  return 0.5 * std::erfc(-x / std::numbers::sqrt2) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi);
}
double ref_gelu_tanh_grad(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  const double u = k * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}
double ref_sign(double x) {
  return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0);
}

struct UnaryCase {
  UnaryOp op;
  const char* name;
  double lo, hi, a, b;
  std::function<double(double)> ref;
  double atol = 1e-6;  // float32 absolute slack (near zeros of the function)
};

std::vector<UnaryCase> unary_cases() {
  const double beta = 2.0, thr = 20.0;
  return {
      {UnaryOp::identity, "identity", -5, 5, 0, 0, [](double x) { return x; }},
      {UnaryOp::neg, "neg", -5, 5, 0, 0, [](double x) { return -x; }},
      {UnaryOp::abs, "abs", -5, 5, 0, 0, [](double x) { return std::abs(x); }},
      {UnaryOp::sign, "sign", -5, 5, 0, 0, ref_sign},
      {UnaryOp::exp, "exp", -85, 85, 0, 0, [](double x) { return std::exp(x); }, 0},
      {UnaryOp::log, "log", 1e-3, 1e3, 0, 0, [](double x) { return std::log(x); }},
      {UnaryOp::log1p, "log1p", -0.9, 10, 0, 0, [](double x) { return std::log1p(x); }},
      {UnaryOp::expm1, "expm1", -5, 5, 0, 0, [](double x) { return std::expm1(x); }},
      {UnaryOp::sqrt, "sqrt", 0, 100, 0, 0, [](double x) { return std::sqrt(x); }},
      {UnaryOp::rsqrt, "rsqrt", 1e-2, 100, 0, 0, [](double x) { return 1 / std::sqrt(x); }},
      {UnaryOp::reciprocal, "reciprocal", 0.1, 10, 0, 0, [](double x) { return 1 / x; }},
      {UnaryOp::square, "square", -5, 5, 0, 0, [](double x) { return x * x; }},
      {UnaryOp::sin, "sin", -10, 10, 0, 0, [](double x) { return std::sin(x); }},
      {UnaryOp::cos, "cos", -10, 10, 0, 0, [](double x) { return std::cos(x); }},
      {UnaryOp::tanh, "tanh", -10, 10, 0, 0, [](double x) { return std::tanh(x); }, 0},
      {UnaryOp::sigmoid, "sigmoid", -30, 30, 0, 0, ref_sigmoid, 0},
      {UnaryOp::relu, "relu", -5, 5, 0, 0, [](double x) { return x < 0 ? 0.0 : x; }},
      {UnaryOp::leaky_relu, "leaky_relu", -5, 5, 0.01, 0,
       [](double x) { return x > 0 ? x : 0.01 * x; }},
      {UnaryOp::gelu, "gelu", -14, 10, 0, 0, ref_gelu, 0},
      {UnaryOp::gelu_tanh, "gelu_tanh", -5, 5, 0, 0, ref_gelu_tanh, 0},
      {UnaryOp::silu, "silu", -30, 30, 0, 0, [](double x) { return x * ref_sigmoid(x); }, 0},
      {UnaryOp::softplus, "softplus", -10, 15, beta, thr,
       [=](double x) { return beta * x > thr ? x : std::log1p(std::exp(beta * x)) / beta; }, 0},
      {UnaryOp::erf, "erf", -6, 6, 0, 0, [](double x) { return std::erf(x); }, 0},
      {UnaryOp::floor, "floor", -10, 10, 0, 0, [](double x) { return std::floor(x); }},
      {UnaryOp::ceil, "ceil", -10, 10, 0, 0, [](double x) { return std::ceil(x); }},
      {UnaryOp::round, "round", -10, 10, 0, 0, [](double x) { return std::nearbyint(x); }},
      {UnaryOp::affine, "affine", -5, 5, 2.5, -1.0, [](double x) { return 2.5 * x - 1.0; }},
      {UnaryOp::pow_scalar, "pow_scalar", 0.1, 5, 1.7, 0,
       [](double x) { return std::pow(x, 1.7); }},
      {UnaryOp::rpow_scalar, "rpow_scalar", -5, 5, 2.5, 0,
       [](double x) { return std::pow(2.5, x); }, 0},
      {UnaryOp::clamp, "clamp", -2, 2, -0.5, 0.75,
       [](double x) { return std::min(std::max(x, -0.5), 0.75); }},
      {UnaryOp::tanh_grad_from_output, "tanh_grad_from_output", -1, 1, 0, 0,
       [](double y) { return 1 - y * y; }},
      {UnaryOp::sigmoid_grad_from_output, "sigmoid_grad_from_output", 0, 1, 0, 0,
       [](double y) { return y * (1 - y); }},
  };
}

// Runs op on `x` (any layout) into a fresh contiguous output and checks against the reference.
void check_unary(const UnaryCase& c, const Tensor& x, DType out_dtype, double rtol, double atol) {
  Tensor out = poisoned(x.sizes(), out_dtype);
  cpu().unary(c.op, x, out, c.a, c.b);
  std::vector<double> in = read(x), expected(in.size());
  for (size_t i = 0; i < in.size(); ++i) expected[i] = c.ref(in[i]);
  EXPECT_TRUE(close(read(out), rounded(expected, out_dtype), rtol, atol,
                    std::string(c.name) + " " + dtype_name(x.dtype())));
}

TEST(BackendElementwise, UnaryEveryOpContiguousAllFloatDTypes) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      // f16 cannot hold exp(85) etc.: keep half inputs in a range whose results it represents.
      const double lo = dt == DType::f16 ? std::max(c.lo, -8.0) : c.lo;
      const double hi = dt == DType::f16 ? std::min(c.hi, 8.0) : c.hi;
      // > kGrain elements so the parallel path runs too.
      const int64_t n = dt == DType::f32 ? 70001 : 4099;
      Tensor x = make({n}, uniform_values(n, seed, lo, hi), dt);
      // f32: results in the subnormal range (gelu's far tail) carry few significant bits.
      const double atol =
          dt == DType::f64 ? 1e-13 : (dt == DType::f32 ? std::max(c.atol, 1e-37) : 1e-2);
      check_unary(c, x, dt, rtol_for(dt), atol);
    }
  }
}

TEST(BackendElementwise, UnaryStridedAndBroadcastInputs) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (const UnaryCase& c : unary_cases()) {
    // A transposed [37, 53] view of a [53, 37] tensor, and a [5, 7] broadcast of a [7] row.
    Tensor base = make({53, 37}, uniform_values(53 * 37, seed, c.lo, c.hi), DType::f32);
    Tensor xt = base.as_strided_raw({37, 53}, {1, 37}, 0);
    check_unary(c, xt, DType::f32, 1e-5, std::max(c.atol, 1e-37));
    Tensor row = make({7}, uniform_values(7, seed + 1, c.lo, c.hi), DType::f64);
    check_unary(c, row.as_strided_raw({5, 7}, {0, 1}, 0), DType::f64, 1e-12, 1e-13);
    // Strided output: write through a transposed view.
    Tensor out_base = poisoned({53, 37}, DType::f32);
    Tensor out = out_base.as_strided_raw({37, 53}, {1, 37}, 0);
    cpu().unary(c.op, xt, out, c.a, c.b);
    std::vector<double> in = read(xt), expected(in.size());
    for (size_t i = 0; i < in.size(); ++i) expected[i] = c.ref(in[i]);
    EXPECT_TRUE(
        close(read(out), rounded(expected, DType::f32), 1e-5, std::max(c.atol, 1e-37), c.name));
  }
}

TEST(BackendElementwise, UnarySpecialValues) {
  Tensor x = make({8}, {kNaN, kInf, -kInf, 0.5, 1.5, 2.5, -0.5, -2.5}, DType::f32);
  auto run = [&](UnaryOp op, double a = 0, double b = 0, DType out_dtype = DType::f32) {
    Tensor out = poisoned({8}, out_dtype);
    cpu().unary(op, x, out, a, b);
    return read(out);
  };
  EXPECT_TRUE(close(run(UnaryOp::round), {kNaN, kInf, -kInf, 0, 2, 2, -0.0, -2}, 0, 0, "round"));
  EXPECT_TRUE(close(run(UnaryOp::isnan, 0, 0, DType::boolean), {1, 0, 0, 0, 0, 0, 0, 0}, 0, 0));
  EXPECT_TRUE(close(run(UnaryOp::isinf, 0, 0, DType::boolean), {0, 1, 1, 0, 0, 0, 0, 0}, 0, 0));
  EXPECT_TRUE(
      close(run(UnaryOp::logical_not, 0, 0, DType::boolean), {0, 0, 0, 0, 0, 0, 0, 0}, 0, 0));
  EXPECT_TRUE(close(run(UnaryOp::relu), {kNaN, kInf, 0, 0.5, 1.5, 2.5, 0, 0}, 0, 0, "relu"));
  EXPECT_TRUE(close(run(UnaryOp::sign), {0, 1, -1, 1, 1, 1, -1, -1}, 0, 0, "sign"));
  EXPECT_TRUE(close(
      run(UnaryOp::exp),
      {kNaN, kInf, 0, std::exp(0.5), std::exp(1.5), std::exp(2.5), std::exp(-0.5), std::exp(-2.5)},
      2e-7, 0, "exp"));
  EXPECT_TRUE(close(run(UnaryOp::tanh),
                    {kNaN, 1, -1, std::tanh(0.5), std::tanh(1.5), std::tanh(2.5), std::tanh(-0.5),
                     std::tanh(-2.5)},
                    3e-7, 0, "tanh"));
  EXPECT_TRUE(close(run(UnaryOp::sigmoid),
                    {kNaN, 1, 0, ref_sigmoid(0.5), ref_sigmoid(1.5), ref_sigmoid(2.5),
                     ref_sigmoid(-0.5), ref_sigmoid(-2.5)},
                    3e-7, 0, "sigmoid"));
  EXPECT_TRUE(close(run(UnaryOp::gelu),
                    {kNaN, kInf, kNaN, ref_gelu(0.5), ref_gelu(1.5), ref_gelu(2.5), ref_gelu(-0.5),
                     ref_gelu(-2.5)},
                    1e-6, 0, "gelu"));
  // NaN bounds mean "no bound"; NaN inputs stay NaN.
  EXPECT_TRUE(close(run(UnaryOp::clamp, kNaN, 1.0), {kNaN, 1, -kInf, 0.5, 1, 1, -0.5, -2.5}, 0, 0,
                    "clamp max"));
  EXPECT_TRUE(close(run(UnaryOp::clamp, 0.0, kNaN), {kNaN, kInf, 0, 0.5, 1.5, 2.5, 0, 0}, 0, 0,
                    "clamp min"));
  // Tiny exp arguments land in the subnormal range rather than flushing early.
  Tensor tiny = make({3}, {-88.0, -100.0, -110.0}, DType::f32);
  Tensor out = poisoned({3}, DType::f32);
  cpu().unary(UnaryOp::exp, tiny, out, 0, 0);
  const std::vector<double> got = read(out);
  EXPECT_NEAR(got[0] / std::exp(-88.0), 1.0, 1e-6);
  EXPECT_NEAR(got[1] / std::exp(-100.0), 1.0, 5e-2);  // subnormal: few mantissa bits
  EXPECT_EQ(got[2], 0.0);
}

TEST(BackendElementwise, GeluAndErfTailsAreRelativelyAccurate) {
  // The far negative tail of GELU and erf's small arguments are where naive formulas cancel.
  std::vector<double> xs;
  for (double x = -13.0; x <= 13.0; x += 0.0371) xs.push_back(x);
  for (double x = 1e-6; x < 1e-2; x *= 1.7) xs.push_back(x);
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor x = make({n}, xs, DType::f32);
  std::vector<double> in = read(x);
  auto check = [&](UnaryOp op, const std::function<double(double)>& ref, double rtol) {
    Tensor out = poisoned({n}, DType::f32);
    cpu().unary(op, x, out, 0, 0);
    std::vector<double> expected(in.size());
    for (size_t i = 0; i < in.size(); ++i) expected[i] = ref(in[i]);
    EXPECT_TRUE(close(read(out), expected, rtol, 1e-37, "tail"));
  };
  check(UnaryOp::gelu, ref_gelu, 3e-6);
  check(
      UnaryOp::erf, [](double v) { return std::erf(v); }, 1e-6);
  check(
      UnaryOp::silu, [](double v) { return v * ref_sigmoid(v); }, 1e-6);
  // gelu_tanh's reference in its stable form x * sigmoid(2u). Its tail is e^{2u} with |2u| ~ 70
  // at x = -9, so float rounding of u alone costs ~|2u| * 6e-8 relative.
  check(
      UnaryOp::gelu_tanh,
      [](double v) {
        const double u = std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v);
        return v * ref_sigmoid(2 * u);
      },
      3e-5);
}

TEST(BackendElementwise, UnaryIntegerOps) {
  for (DType dt : {DType::i32, DType::i64}) {
    Tensor x = make({6}, {-7, -1, 0, 1, 5, 100}, dt);
    auto run = [&](UnaryOp op, double a = 0, double b = 0) {
      Tensor out = poisoned({6}, dt);
      cpu().unary(op, x, out, a, b);
      return read(out);
    };
    EXPECT_TRUE(close(run(UnaryOp::neg), {7, 1, 0, -1, -5, -100}, 0, 0));
    EXPECT_TRUE(close(run(UnaryOp::abs), {7, 1, 0, 1, 5, 100}, 0, 0));
    EXPECT_TRUE(close(run(UnaryOp::sign), {-1, -1, 0, 1, 1, 1}, 0, 0));
    EXPECT_TRUE(close(run(UnaryOp::square), {49, 1, 0, 1, 25, 10000}, 0, 0));
    EXPECT_TRUE(close(run(UnaryOp::relu), {0, 0, 0, 1, 5, 100}, 0, 0));
    EXPECT_TRUE(close(run(UnaryOp::affine, 3, -2), {-23, -5, -2, 1, 13, 298}, 0, 0));
    EXPECT_TRUE(close(run(UnaryOp::clamp, -1.5, 4.5), {-1, -1, 0, 1, 4, 4}, 0, 0));
    EXPECT_TRUE(close(run(UnaryOp::floor), {-7, -1, 0, 1, 5, 100}, 0, 0));
  }
  // int64 beyond 2^53 stays exact (no round trip through double).
  const double big = 9007199254740993.0;  // not exactly representable as double
  Tensor x = empty({1}, {DType::i64, Device::cpu(), false});
  x.data_ptr<int64_t>()[0] = (int64_t{1} << 53) + 1;
  Tensor out = empty({1}, {DType::i64, Device::cpu(), false});
  cpu().unary(UnaryOp::neg, x, out, 0, 0);
  EXPECT_EQ(out.data_ptr<int64_t>()[0], -((int64_t{1} << 53) + 1)) << big;
}

// ------------------------------------------------------------------------------------ binary
struct BinaryCase {
  BinaryOp op;
  const char* name;
  double alo, ahi, blo, bhi, alpha;
  std::function<double(double, double)> ref;
  bool predicate = false;
};

double py_mod(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

std::vector<BinaryCase> binary_cases() {
  return {
      {BinaryOp::add, "add", -5, 5, -5, 5, 1.0, [](double a, double b) { return a + b; }},
      {BinaryOp::add, "add_alpha", -5, 5, -5, 5, -0.5,
       [](double a, double b) { return a - 0.5 * b; }},
      {BinaryOp::sub, "sub_alpha", -5, 5, -5, 5, 2.0, [](double a, double b) { return a - 2 * b; }},
      {BinaryOp::mul, "mul", -5, 5, -5, 5, 0, [](double a, double b) { return a * b; }},
      {BinaryOp::div, "div", -5, 5, 0.5, 3, 0, [](double a, double b) { return a / b; }},
      {BinaryOp::pow, "pow", 0.1, 4, -2, 2, 0, [](double a, double b) { return std::pow(a, b); }},
      {BinaryOp::maximum, "maximum", -5, 5, -5, 5, 0,
       [](double a, double b) { return std::max(a, b); }},
      {BinaryOp::minimum, "minimum", -5, 5, -5, 5, 0,
       [](double a, double b) { return std::min(a, b); }},
      {BinaryOp::atan2, "atan2", -5, 5, -5, 5, 0,
       [](double a, double b) { return std::atan2(a, b); }},
      {BinaryOp::fmod, "fmod", -9, 9, -3, -0.5, 0,
       [](double a, double b) { return std::fmod(a, b); }},
      {BinaryOp::remainder, "remainder", -9, 9, 0.5, 3, 0, py_mod},
      {BinaryOp::remainder, "remainder_neg", -9, 9, -3, -0.5, 0, py_mod},
      {BinaryOp::relu_backward, "relu_backward", -5, 5, -5, 5, 0,
       [](double g, double x) { return x > 0 ? g : 0.0; }},
      {BinaryOp::leaky_relu_backward, "leaky_relu_backward", -5, 5, -5, 5, 0.2,
       [](double g, double x) { return x > 0 ? g : 0.2 * g; }},
      {BinaryOp::gelu_backward, "gelu_backward", -3, 3, -8, 8, 0,
       [](double g, double x) { return g * ref_gelu_grad(x); }},
      {BinaryOp::gelu_tanh_backward, "gelu_tanh_backward", -3, 3, -6, 6, 0,
       [](double g, double x) { return g * ref_gelu_tanh_grad(x); }},
      {BinaryOp::silu_backward, "silu_backward", -3, 3, -20, 20, 0,
       [](double g, double x) {
         const double s = ref_sigmoid(x);
         return g * s * (1 + x * (1 - s));
       }},
      {BinaryOp::sign_mul, "sign_mul", -5, 5, -2, 2, 0,
       [](double g, double x) { return g * ref_sign(x); }},
      {BinaryOp::eq, "eq", -2, 2, -2, 2, 0, [](double a, double b) { return a == b; }, true},
      {BinaryOp::ne, "ne", -2, 2, -2, 2, 0, [](double a, double b) { return a != b; }, true},
      {BinaryOp::lt, "lt", -2, 2, -2, 2, 0, [](double a, double b) { return a < b; }, true},
      {BinaryOp::le, "le", -2, 2, -2, 2, 0, [](double a, double b) { return a <= b; }, true},
      {BinaryOp::gt, "gt", -2, 2, -2, 2, 0, [](double a, double b) { return a > b; }, true},
      {BinaryOp::ge, "ge", -2, 2, -2, 2, 0, [](double a, double b) { return a >= b; }, true},
      {BinaryOp::logical_and, "logical_and", -1, 1, -1, 1, 0,
       [](double a, double b) { return a != 0 && b != 0; }, true},
      {BinaryOp::logical_or, "logical_or", -1, 1, -1, 1, 0,
       [](double a, double b) { return a != 0 || b != 0; }, true},
      {BinaryOp::logical_xor, "logical_xor", -1, 1, -1, 1, 0,
       [](double a, double b) { return (a != 0) != (b != 0); }, true},
  };
}

// Inputs with ties and zeros for the comparisons: values on a coarse grid.
std::vector<double> grid_values(int64_t n, uint64_t seed, double lo, double hi, bool coarse) {
  std::vector<double> v = uniform_values(n, seed, lo, hi);
  if (coarse) {
    for (double& x : v) x = std::round(x * 2) / 2;
  }
  return v;
}

TEST(BackendElementwise, BinaryEveryOpAllLayouts) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (const BinaryCase& c : binary_cases()) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      const DType out_dt = c.predicate ? DType::boolean : dt;
      const double rtol = c.predicate ? 0 : rtol_for(dt);
      const double atol = c.predicate ? 0
                                      : (dt == DType::f64   ? 1e-13
                                         : dt == DType::f32 ? 1e-6
                                                            : 1e-2);
      // (1) contiguous, large; (2) a transposed; (3) b broadcast along rows (stride 0).
      const int64_t n = 40000;
      Tensor a = make({n}, grid_values(n, seed, c.alo, c.ahi, c.predicate), dt);
      Tensor b = make({n}, grid_values(n, seed + 7, c.blo, c.bhi, c.predicate), dt);
      Tensor a_base = make({9, 11}, grid_values(99, seed + 1, c.alo, c.ahi, c.predicate), dt);
      Tensor b_row = make({9}, grid_values(9, seed + 2, c.blo, c.bhi, c.predicate), dt);
      const std::vector<std::pair<Tensor, Tensor>> layouts = {
          {a, b},
          {a_base.as_strided_raw({11, 9}, {1, 11}, 0), b_row.as_strided_raw({11, 9}, {0, 1}, 0)}};
      for (const auto& [x, y] : layouts) {
        Tensor out = poisoned(x.sizes(), out_dt);
        cpu().binary(c.op, x, y, out, c.alpha);
        // bf16 mode: cast results of ops whose rounding of the reference straddles a boundary.
        std::vector<double> xa = read(x), yb = read(y), expected(xa.size());
        for (size_t i = 0; i < xa.size(); ++i) expected[i] = c.ref(xa[i], yb[i]);
        if (!c.predicate) expected = rounded(expected, dt);
        const bool discontinuous = c.op == BinaryOp::fmod || c.op == BinaryOp::remainder;
        EXPECT_TRUE(close(read(out), expected, rtol,
                          discontinuous && dt != DType::f64 ? 0.05 : atol,
                          std::string(c.name) + " " + dtype_name(dt)));
      }
    }
  }
}

TEST(BackendElementwise, BinarySpecialValues) {
  Tensor a = make({4}, {kNaN, 1.0, kNaN, -0.0}, DType::f32);
  Tensor b = make({4}, {1.0, kNaN, kNaN, 0.0}, DType::f32);
  Tensor out = poisoned({4}, DType::f32);
  cpu().binary(BinaryOp::maximum, a, b, out, 0);
  EXPECT_TRUE(close(read(out), {kNaN, kNaN, kNaN, 0.0}, 0, 0, "maximum propagates NaN"));
  cpu().binary(BinaryOp::minimum, a, b, out, 0);
  EXPECT_TRUE(close(read(out), {kNaN, kNaN, kNaN, 0.0}, 0, 0, "minimum propagates NaN"));
  Tensor cmp = poisoned({4}, DType::boolean);
  cpu().binary(BinaryOp::eq, a, b, cmp, 0);
  EXPECT_TRUE(close(read(cmp), {0, 0, 0, 1}, 0, 0, "NaN != NaN, -0 == 0"));
  cpu().binary(BinaryOp::ne, a, b, cmp, 0);
  EXPECT_TRUE(close(read(cmp), {1, 1, 1, 0}, 0, 0));
}

TEST(BackendElementwise, BinaryIntegerAndBoolOps) {
  for (DType dt : {DType::i32, DType::i64}) {
    Tensor a = make({6}, {-7, 7, -7, 7, 0, 3}, dt);
    Tensor b = make({6}, {3, -3, -3, 3, 5, 0}, dt);
    auto run = [&](BinaryOp op, double alpha = 1) {
      Tensor out = poisoned({6}, dt);
      cpu().binary(op, a, b, out, alpha);
      return read(out);
    };
    EXPECT_TRUE(close(run(BinaryOp::add, 2), {-1, 1, -13, 13, 10, 3}, 0, 0, "add"));
    EXPECT_TRUE(close(run(BinaryOp::sub), {-10, 10, -4, 4, -5, 3}, 0, 0, "sub"));
    EXPECT_TRUE(close(run(BinaryOp::mul), {-21, -21, 21, 21, 0, 0}, 0, 0, "mul"));
    EXPECT_TRUE(close(run(BinaryOp::maximum), {3, 7, -3, 7, 5, 3}, 0, 0, "maximum"));
    EXPECT_TRUE(close(run(BinaryOp::minimum), {-7, -3, -7, 3, 0, 0}, 0, 0, "minimum"));
    // Python % takes the divisor's sign (division by zero gives 0 instead of trapping).
    EXPECT_TRUE(close(run(BinaryOp::remainder), {2, -2, -1, 1, 0, 0}, 0, 0, "remainder"));
    EXPECT_TRUE(close(run(BinaryOp::fmod), {-1, 1, -1, 1, 0, 0}, 0, 0, "fmod"));
    Tensor e = make({6}, {2, 3, 0, 1, 10, 2}, dt);
    Tensor out = poisoned({6}, dt);
    cpu().binary(BinaryOp::pow, a, e, out, 1);
    EXPECT_TRUE(close(read(out), {49, 343, 1, 7, 0, 9}, 0, 0, "pow"));
  }
  // uint8 wraps like PyTorch.
  Tensor a8 = make({2}, {250, 3}, DType::u8), b8 = make({2}, {10, 5}, DType::u8);
  Tensor o8 = poisoned({2}, DType::u8);
  cpu().binary(BinaryOp::add, a8, b8, o8, 1);
  EXPECT_TRUE(close(read(o8), {4, 8}, 0, 0, "u8 add wraps"));
  cpu().binary(BinaryOp::sub, b8, a8, o8, 1);
  EXPECT_TRUE(close(read(o8), {16, 2}, 0, 0, "u8 sub wraps"));
  // bool + bool is logical or; bool * bool is and.
  Tensor p = make({4}, {0, 0, 1, 1}, DType::boolean), q = make({4}, {0, 1, 0, 1}, DType::boolean);
  Tensor ob = poisoned({4}, DType::boolean);
  cpu().binary(BinaryOp::add, p, q, ob, 1);
  EXPECT_TRUE(close(read(ob), {0, 1, 1, 1}, 0, 0, "bool add"));
  cpu().binary(BinaryOp::mul, p, q, ob, 1);
  EXPECT_TRUE(close(read(ob), {0, 0, 0, 1}, 0, 0, "bool mul"));
  cpu().binary(BinaryOp::logical_xor, p, q, ob, 0);
  EXPECT_TRUE(close(read(ob), {0, 1, 1, 0}, 0, 0, "xor"));
  // int64 comparisons beyond 2^53 are exact.
  Tensor big_a = empty({1}, {DType::i64, Device::cpu(), false});
  Tensor big_b = empty({1}, {DType::i64, Device::cpu(), false});
  big_a.data_ptr<int64_t>()[0] = (int64_t{1} << 60) + 1;
  big_b.data_ptr<int64_t>()[0] = int64_t{1} << 60;
  Tensor gt = poisoned({1}, DType::boolean);
  cpu().binary(BinaryOp::gt, big_a, big_b, gt, 0);
  EXPECT_TRUE(gt.data_ptr<bool>()[0]);
}

// ----------------------------------------------------------------------------------- ternary
TEST(BackendElementwise, TernaryOps) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (DType dt : {DType::f32, DType::f64, DType::f16}) {
    const int64_t n = 50000;
    Tensor a = make({n}, uniform_values(n, seed, -3, 3), dt);
    Tensor b = make({n}, uniform_values(n, seed + 1, -3, 3), dt);
    Tensor w = make({n}, uniform_values(n, seed + 2, -0.5, 1.5), dt);
    std::vector<double> cond_v = uniform_values(n, seed + 3, -1, 1);
    for (double& v : cond_v) v = v > 0;
    Tensor cond = make({n}, cond_v, DType::boolean);
    const std::vector<double> av = read(a), bv = read(b), wv = read(w);
    std::vector<double> e_where(n), e_lerp(n), e_addcmul(n);
    for (int64_t i = 0; i < n; ++i) {
      e_where[i] = cond_v[i] != 0 ? av[i] : bv[i];
      e_lerp[i] = av[i] + wv[i] * (bv[i] - av[i]);
      e_addcmul[i] = av[i] + 0.75 * bv[i] * wv[i];
    }
    const double rtol = rtol_for(dt),
                 atol = dt == DType::f64 ? 1e-13 : 2e-6 * (dt == DType::f16 ? 1e3 : 1);
    Tensor out = poisoned({n}, dt);
    cpu().ternary(TernaryOp::where, cond, a, b, out, 0);
    EXPECT_TRUE(close(read(out), e_where, 0, 0, "where"));
    cpu().ternary(TernaryOp::lerp, a, b, w, out, 0);
    EXPECT_TRUE(close(read(out), rounded(e_lerp, dt), rtol, atol, "lerp"));
    cpu().ternary(TernaryOp::addcmul, a, b, w, out, 0.75);
    EXPECT_TRUE(close(read(out), rounded(e_addcmul, dt), rtol, atol, "addcmul"));
  }
  // where with a broadcast condition and integer values.
  Tensor cond = make({3}, {1, 0, 1}, DType::boolean);
  Tensor x = make({2, 3}, {1, 2, 3, 4, 5, 6}, DType::i64);
  Tensor y = make({2, 3}, {-1, -2, -3, -4, -5, -6}, DType::i64);
  Tensor out = poisoned({2, 3}, DType::i64);
  cpu().ternary(TernaryOp::where, cond.as_strided_raw({2, 3}, {0, 1}, 0), x, y, out, 0);
  EXPECT_TRUE(close(read(out), {1, -2, 3, 4, -5, 6}, 0, 0, "where i64"));
}

}  // namespace
}  // namespace gradus::backend_test
