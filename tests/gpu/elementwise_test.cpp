// Elementwise and movement kernels on CUDA against the CPU backend: every UnaryOp / BinaryOp /
// TernaryOp in f32, f16, bf16 and f64 (integer-valued ops also in i32 / i64), on contiguous,
// strided and broadcast layouts; casts between all dtype pairs (bit-exact); fill and arange.
#include "gpu/gpu_test_util.h"

namespace gradus {
namespace {

using namespace gpu_test;
using backend::BinaryOp;
using backend::TernaryOp;
using backend::UnaryOp;

const DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f64};

// Input range where each op is well conditioned (avoids comparing values near poles).
std::pair<double, double> unary_domain(UnaryOp op) {
  switch (op) {
    case UnaryOp::log:
    case UnaryOp::sqrt:
    case UnaryOp::rsqrt:
    case UnaryOp::reciprocal:
    case UnaryOp::pow_scalar:
      return {0.25, 4.0};
    case UnaryOp::log1p:
      return {-0.5, 3.0};
    case UnaryOp::tanh_grad_from_output:
    case UnaryOp::sigmoid_grad_from_output:
      return {0.0, 1.0};
    default:
      return {-3.0, 3.0};
  }
}

struct UnaryCase {
  UnaryOp op;
  double a, b;
};

const UnaryCase kUnary[] = {
    {UnaryOp::identity, 0, 0},
    {UnaryOp::neg, 0, 0},
    {UnaryOp::abs, 0, 0},
    {UnaryOp::sign, 0, 0},
    {UnaryOp::exp, 0, 0},
    {UnaryOp::log, 0, 0},
    {UnaryOp::log1p, 0, 0},
    {UnaryOp::expm1, 0, 0},
    {UnaryOp::sqrt, 0, 0},
    {UnaryOp::rsqrt, 0, 0},
    {UnaryOp::reciprocal, 0, 0},
    {UnaryOp::square, 0, 0},
    {UnaryOp::sin, 0, 0},
    {UnaryOp::cos, 0, 0},
    {UnaryOp::tanh, 0, 0},
    {UnaryOp::sigmoid, 0, 0},
    {UnaryOp::relu, 0, 0},
    {UnaryOp::leaky_relu, 0.1, 0},
    {UnaryOp::gelu, 0, 0},
    {UnaryOp::gelu_tanh, 0, 0},
    {UnaryOp::silu, 0, 0},
    {UnaryOp::softplus, 2, 3},
    {UnaryOp::erf, 0, 0},
    {UnaryOp::floor, 0, 0},
    {UnaryOp::ceil, 0, 0},
    {UnaryOp::round, 0, 0},
    {UnaryOp::affine, 1.5, -0.25},
    {UnaryOp::pow_scalar, 2, 0},
    {UnaryOp::pow_scalar, 0.5, 0},
    {UnaryOp::pow_scalar, 1.7, 0},
    {UnaryOp::rpow_scalar, 1.3, 0},
    {UnaryOp::clamp, -0.5, 0.75},
    {UnaryOp::clamp, kNaN, 0.5},
    {UnaryOp::tanh_grad_from_output, 0, 0},
    {UnaryOp::sigmoid_grad_from_output, 0, 0},
};

// Runs op on CPU and GPU over x given in three layouts and compares.
void check_unary(const UnaryCase& c, DType t, DType out_t, const Tensor& x) {
  const Tensor expect = poisoned(x.sizes(), out_t, Device::cpu());
  cpu().unary(c.op, x, expect, c.a, c.b);
  for (int layout = 0; layout < 2; ++layout) {
    const Tensor xg = layout == 0 ? x.to(cuda0()) : strided_copy(x, cuda0(), x.dim() == 2);
    const Tensor out = poisoned(x.sizes(), out_t, cuda0());
    gpu().unary(c.op, xg, out, c.a, c.b);
    EXPECT_TRUE(close(out, expect, tol(t) * 2))
        << "unary op " << static_cast<int>(c.op) << " in " << dtype_name(t) << " layout " << layout;
  }
}

TEST(CudaElementwise, UnaryFloat) {
  GRADUS_REQUIRE_GPU();
  for (DType t : kFloatTypes) {
    for (const UnaryCase& c : kUnary) {
      const auto [lo, hi] = unary_domain(c.op);
      check_unary(c, t, t, rnd({100003}, t, lo, hi));
      check_unary(c, t, t, rnd({37, 129}, t, lo, hi));
    }
  }
}

TEST(CudaElementwise, UnaryPredicatesAndSpecialValues) {
  GRADUS_REQUIRE_GPU();
  for (DType t : kFloatTypes) {
    const Tensor x = tensor({0.0, -0.0, 1.5, -2.0, kNaN, INFINITY, -INFINITY, 3.0, 0.5, -0.5}, {10},
                            {DType::f64})
                         .to(t);
    for (UnaryOp op : {UnaryOp::isnan, UnaryOp::isinf, UnaryOp::logical_not}) {
      check_unary({op, 0, 0}, t, DType::boolean, x);
    }
    for (UnaryOp op : {UnaryOp::sign, UnaryOp::relu, UnaryOp::round, UnaryOp::abs, UnaryOp::exp}) {
      check_unary({op, 0, 0}, t, t, x);
    }
  }
}

TEST(CudaElementwise, UnaryIntegers) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::i32, DType::i64}) {
    const Tensor x = rnd_int({10007}, t, -50, 50);
    // exp goes through double; its results must stay below 2^53 and int32's range (e^20 < 2^31),
    // where a last-bit difference between the CPU's and CUDA's exp cannot change the integer.
    const Tensor small = rnd_int({10007}, t, -20, 20);
    for (const UnaryCase& c : {UnaryCase{UnaryOp::neg, 0, 0},
                               {UnaryOp::abs, 0, 0},
                               {UnaryOp::sign, 0, 0},
                               {UnaryOp::square, 0, 0},
                               {UnaryOp::relu, 0, 0},
                               {UnaryOp::affine, 3, -2},
                               {UnaryOp::affine, 0.5, 0},
                               {UnaryOp::clamp, -7.5, 20.2},
                               {UnaryOp::exp, 0, 0}}) {
      const Tensor& in = c.op == UnaryOp::exp ? small : x;
      const Tensor expect = poisoned(in.sizes(), t, Device::cpu());
      cpu().unary(c.op, in, expect, c.a, c.b);
      const Tensor out = poisoned(in.sizes(), t, cuda0());
      gpu().unary(c.op, in.to(cuda0()), out, c.a, c.b);
      EXPECT_TRUE(identical(out, expect))
          << "op " << static_cast<int>(c.op) << " " << dtype_name(t);
    }
  }
}

const BinaryOp kBinaryFloat[] = {BinaryOp::add,           BinaryOp::sub,
                                 BinaryOp::mul,           BinaryOp::div,
                                 BinaryOp::pow,           BinaryOp::maximum,
                                 BinaryOp::minimum,       BinaryOp::atan2,
                                 BinaryOp::fmod,          BinaryOp::remainder,
                                 BinaryOp::relu_backward, BinaryOp::leaky_relu_backward,
                                 BinaryOp::gelu_backward, BinaryOp::gelu_tanh_backward,
                                 BinaryOp::silu_backward, BinaryOp::sign_mul};
const BinaryOp kPredicates[] = {BinaryOp::eq,          BinaryOp::ne,         BinaryOp::lt,
                                BinaryOp::le,          BinaryOp::gt,         BinaryOp::ge,
                                BinaryOp::logical_and, BinaryOp::logical_or, BinaryOp::logical_xor};

// a [37, 129] (contiguous / transposed storage) and b broadcast as [1, 129] and [37, 1].
void check_binary(BinaryOp op, DType t, DType out_t, double alpha, bool integer_inputs) {
  const bool positive = op == BinaryOp::pow || op == BinaryOp::div || op == BinaryOp::fmod ||
                        op == BinaryOp::remainder;
  const Shape s = {37, 129};
  const Tensor a = integer_inputs ? rnd_int(s, t, -3, 4) : rnd(s, t, positive ? 0.5 : -2, 2);
  const Tensor b_row =
      integer_inputs ? rnd_int({1, 129}, t, -3, 4) : rnd({1, 129}, t, positive ? 0.5 : -2, 2);
  const Tensor b_col = integer_inputs ? rnd_int({37, 1}, t, 1, 4) : rnd({37, 1}, t, 0.5, 2);
  for (const Tensor& b : {b_row, b_col}) {
    const Shape bstride = b.size(0) == 1 ? Shape{0, 1} : Shape{1, 0};
    const Tensor bc = b.as_strided_raw(s, bstride, b.offset());
    const Tensor expect = poisoned(s, out_t, Device::cpu());
    cpu().binary(op, a, bc, expect, alpha);
    for (int layout = 0; layout < 2; ++layout) {
      const Tensor ag = layout == 0 ? a.to(cuda0()) : strided_copy(a, cuda0(), true);
      const Tensor bg = b.to(cuda0());
      const Tensor out = poisoned(s, out_t, cuda0());
      gpu().binary(op, ag, bg.as_strided_raw(s, bstride, bg.offset()), out, alpha);
      EXPECT_TRUE(is_floating(out_t) ? close(out, expect, tol(t) * 2) : identical(out, expect))
          << "binary op " << static_cast<int>(op) << " " << dtype_name(t) << " layout " << layout;
    }
  }
}

TEST(CudaElementwise, BinaryFloat) {
  GRADUS_REQUIRE_GPU();
  for (DType t : kFloatTypes) {
    for (BinaryOp op : kBinaryFloat) check_binary(op, t, t, 0.75, false);
    for (BinaryOp op : kPredicates) check_binary(op, t, DType::boolean, 0, false);
  }
}

TEST(CudaElementwise, BinaryIntegers) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::i32, DType::i64}) {
    for (BinaryOp op :
         {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::maximum, BinaryOp::minimum,
          BinaryOp::fmod, BinaryOp::remainder, BinaryOp::pow, BinaryOp::div}) {
      check_binary(op, t, t, 2, true);
    }
    for (BinaryOp op : kPredicates) check_binary(op, t, DType::boolean, 0, true);
  }
}

TEST(CudaElementwise, LargeContiguousMapsOddSizes) {
  GRADUS_REQUIRE_GPU();
  for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{1025}, int64_t{4000037}}) {
    const Tensor a = rnd({n}, DType::f32), b = rnd({n}, DType::f32);
    const Tensor expect = poisoned({n}, DType::f32, Device::cpu());
    cpu().binary(BinaryOp::mul, a, b, expect, 0);
    // An offset view (misaligned for 16-byte vectors) and the aligned buffer.
    for (int64_t shift : {int64_t{0}, int64_t{1}}) {
      Tensor buf_a = empty({n + 1}, {DType::f32, cuda0()});
      Tensor va = buf_a.as_strided_raw({n}, {1}, shift);
      gpu().copy(a.to(cuda0()), va);
      const Tensor out = poisoned({n}, DType::f32, cuda0());
      gpu().binary(BinaryOp::mul, va, b.to(cuda0()), out, 0);
      EXPECT_TRUE(close(out, expect, tol(DType::f32))) << "n " << n << " shift " << shift;
    }
  }
}

TEST(CudaElementwise, Ternary) {
  GRADUS_REQUIRE_GPU();
  const Shape s = {61, 67};
  for (DType t : kFloatTypes) {
    const Tensor cond = gt(rnd(s, DType::f32), 0.0);
    const Tensor a = rnd(s, t), b = rnd(s, t), w = rnd({1, 67}, t, -0.5, 1.5);
    const Tensor wc = w.as_strided_raw(s, {0, 1}, w.offset());
    struct Case {
      TernaryOp op;
      Tensor x, y, z;
    };
    for (const Case& c : {Case{TernaryOp::where, cond, a, b}, Case{TernaryOp::lerp, a, b, wc},
                          Case{TernaryOp::addcmul, a, b, wc}}) {
      const Tensor expect = poisoned(s, t, Device::cpu());
      cpu().ternary(c.op, c.x, c.y, c.z, expect, 0.5);
      const Tensor out = poisoned(s, t, cuda0());
      const Tensor zg = c.z.to(cuda0());
      gpu().ternary(c.op, strided_copy(c.x, cuda0(), true), c.y.to(cuda0()),
                    c.op == TernaryOp::where ? zg : wc.to(cuda0()), out, 0.5);
      EXPECT_TRUE(close(out, expect, tol(t) * 2))
          << "ternary " << static_cast<int>(c.op) << " " << dtype_name(t);
    }
  }
  // where over integers.
  const Tensor cond = gt(rnd(s, DType::f32), 0.0);
  const Tensor a = rnd_int(s, DType::i64, -9, 9), b = rnd_int(s, DType::i64, -9, 9);
  const Tensor expect = poisoned(s, DType::i64, Device::cpu());
  cpu().ternary(TernaryOp::where, cond, a, b, expect, 0);
  const Tensor out = poisoned(s, DType::i64, cuda0());
  gpu().ternary(TernaryOp::where, cond.to(cuda0()), a.to(cuda0()), b.to(cuda0()), out, 0);
  EXPECT_TRUE(identical(out, expect));
}

TEST(CudaCopy, CastsBetweenAllDtypesAreBitExact) {
  GRADUS_REQUIRE_GPU();
  const DType all[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                       DType::i32, DType::i64, DType::u8,  DType::boolean};
  // Halfway cases for rounding, out-of-range values, NaN and infinities included.
  std::vector<double> v = {0.0,           -0.0,   1.0,   -1.0,     0.5,       1.5,   2.5,
                           -2.5,          255.0,  256.0, -3.7,     1e10,      -1e10, 65520.0,
                           1.00048828125, 3.0e38, kNaN,  INFINITY, -INFINITY, 1e-8};
  std::mt19937_64 rng(testing::fresh_seed());
  std::uniform_real_distribution<double> d(-300, 300);
  for (int i = 0; i < 5000; ++i) v.push_back(d(rng));
  const Tensor base = tensor(v, {static_cast<int64_t>(v.size())}, {DType::f64});
  for (DType from : all) {
    // Source values as the CPU stores them in `from` (so both sides start from the same bits).
    Tensor src = empty(base.sizes(), {from, Device::cpu()});
    cpu().copy(base, src);
    for (DType to : all) {
      const Tensor expect = poisoned(base.sizes(), to, Device::cpu());
      cpu().copy(src, expect);
      const Tensor out = poisoned(base.sizes(), to, cuda0());
      gpu().copy(strided_copy(src, cuda0()), out);
      EXPECT_TRUE(same_bits(out, expect)) << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

TEST(CudaCopy, StridedBroadcastAndManyDims) {
  GRADUS_REQUIRE_GPU();
  // 10-D tensor with a permutation (more dims than the kernels' calculators hold after merging).
  Shape s = {2, 3, 2, 3, 2, 3, 2, 3, 2, 3};
  const Tensor x = rnd(s, DType::f32);
  std::vector<int64_t> perm = {9, 0, 8, 1, 7, 2, 6, 3, 5, 4};
  const Tensor xp = x.permute(perm);
  const Tensor expect = xp.contiguous();
  const Tensor xg = x.to(cuda0()).permute(perm);
  const Tensor out = poisoned(xp.sizes(), DType::f32, cuda0());
  gpu().copy(xg, out);
  EXPECT_TRUE(identical(out, expect));
  // Broadcast source.
  const Tensor row = rnd({1, 300}, DType::bf16);
  const Tensor rg = row.to(cuda0());
  const Tensor out2 = poisoned({200, 300}, DType::f32, cuda0());
  gpu().copy(rg.as_strided_raw({200, 300}, {0, 1}, rg.offset()), out2);
  const Tensor e2 = poisoned({200, 300}, DType::f32, Device::cpu());
  cpu().copy(row.as_strided_raw({200, 300}, {0, 1}, row.offset()), e2);
  EXPECT_TRUE(identical(out2, e2));
}

TEST(CudaCopy, FillAndArange) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64,
                  DType::u8, DType::boolean}) {
    for (double value : {0.0, -1.25, 3.0, 1e9}) {
      const Tensor expect = poisoned({1001}, t, Device::cpu());
      cpu().fill(expect, value);
      const Tensor out = poisoned({1001}, t, cuda0());
      gpu().fill(out, value);
      EXPECT_TRUE(same_bits(out, expect)) << dtype_name(t) << " " << value;
      // Strided destination: only the viewed elements change.
      Tensor buf = empty({2002}, {t, cuda0()});
      gpu().fill(buf, 5.0);
      gpu().fill(buf.as_strided_raw({1001}, {2}, 0), value);
      const std::vector<double> got = buf.to(Device::cpu()).to_vector<double>();
      const double five = static_cast<double>(full({1}, 5.0, {t}).to_vector<double>()[0]);
      EXPECT_EQ(got[1], five);
    }
    const Tensor ea = poisoned({777}, t, Device::cpu());
    cpu().arange(ea, -3.0, 0.1);
    const Tensor ga = poisoned({777}, t, cuda0());
    gpu().arange(ga, -3.0, 0.1);
    EXPECT_TRUE(same_bits(ga, ea)) << dtype_name(t);
  }
}

}  // namespace
}  // namespace gradus
