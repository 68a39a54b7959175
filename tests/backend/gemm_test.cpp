// CPU batched GEMM against a naive float64 triple loop: transposes, row/column-major and padded
// operands, broadcast batches, column-major outputs, alpha/beta, bias + activation epilogues,
// f16/bf16, 2-D operands, many small batches, K = 0; oneDNN's GEMMs (bf16 on bf16 instructions,
// float32 on AVX-512) on their own over the same cases, and which path this process takes.
#include <array>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <thread>

#include "backend/cpu/balanced_gemm.h"
#include "backend/cpu/onednn_gemm.h"
#include "backend_test_util.h"
#include "gradus/core/cpu_kernels.h"
#include "gradus/core/threads.h"

namespace gradus::backend_test {
namespace {

using backend::Activation;
using backend::GemmArgs;

double act_ref(Activation act, double v) {
  switch (act) {
    case Activation::relu:
      return v < 0 ? 0 : v;
    case Activation::gelu:
      return 0.5 * v * std::erfc(-v / std::numbers::sqrt2);
    case Activation::gelu_tanh:
      return 0.5 * v *
             (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
    default:
      return v;
  }
}

// Element (b, r, c) of a [B, R, C] (or [R, C]) tensor through its strides, as double.
double at(const Tensor& t, int64_t b, int64_t r, int64_t c) {
  const bool batched = t.dim() == 3;
  int64_t off = r * t.stride(batched ? 1 : 0) + c * t.stride(batched ? 2 : 1);
  if (batched && t.size(0) > 1) off += b * t.stride(0);
  return peek(t, off);
}

// The reference result of gemm(a, b, out0, args) for out's shape.
std::vector<double> ref_gemm(const Tensor& a, const Tensor& b, const Tensor& out0,
                             const GemmArgs& args) {
  const bool batched = out0.dim() == 3;
  const int64_t B = batched ? out0.size(0) : 1;
  const int64_t M = out0.size(batched ? 1 : 0), N = out0.size(batched ? 2 : 1);
  const int64_t K = args.trans_a ? a.size(a.dim() - 2) : a.size(a.dim() - 1);
  std::vector<double> out;
  for (int64_t bi = 0; bi < B; ++bi) {
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = args.trans_a ? at(a, bi, k, m) : at(a, bi, m, k);
          const double bv = args.trans_b ? at(b, bi, n, k) : at(b, bi, k, n);
          acc += av * bv;
        }
        double v = args.alpha * acc;
        if (args.beta != 0) v += args.beta * at(out0, bi, m, n);
        if (args.bias) v += peek(*args.bias, n * args.bias->stride(0));
        out.push_back(act_ref(args.activation, v));
      }
    }
  }
  return out;
}

// A [B, R, C] operand with random values in the requested layout:
// 0 = row-major, 1 = column-major, 2 = row-major with a padded leading dimension,
// 3 = neither (every other column of a wider tensor; the kernel must copy it).
Tensor operand(int64_t B, int64_t R, int64_t C, int layout, DType dt, uint64_t seed) {
  switch (layout) {
    case 1: {
      Tensor s = make({B, C, R}, uniform_values(B * R * C, seed, -1, 1), dt);
      return s.as_strided_raw({B, R, C}, {R * C, 1, R}, 0);
    }
    case 2: {
      Tensor s = make({B, R, C + 5}, uniform_values(B * R * (C + 5), seed, -1, 1), dt);
      return s.as_strided_raw({B, R, C}, {R * (C + 5), C + 5, 1}, 2);
    }
    case 3: {
      Tensor s = make({B, R, 2 * C}, uniform_values(B * R * 2 * C, seed, -1, 1), dt);
      return s.as_strided_raw({B, R, C}, {R * 2 * C, 2 * C, 2}, 0);
    }
    default:
      return make({B, R, C}, uniform_values(B * R * C, seed, -1, 1), dt);
  }
}

// How run_case multiplies: the CPU backend's gemm, or only oneDNN's GEMM (bf16 on bf16
// instructions, float32 on AVX-512), which must take the case (no silent fallback).
enum class Path { backend, onednn };

void run_case(int64_t B, int64_t M, int64_t N, int64_t K, const GemmArgs& base, DType dt,
              int layout_a, int layout_b, bool out_col_major, bool broadcast_a, uint64_t seed,
              double rtol, double atol, Path path = Path::backend) {
  GemmArgs args = base;
  Tensor a = args.trans_a ? operand(broadcast_a ? 1 : B, K, M, layout_a, dt, seed)
                          : operand(broadcast_a ? 1 : B, M, K, layout_a, dt, seed);
  if (broadcast_a && B > 1) {  // batch stride 0
    a = a.as_strided_raw({B, a.size(1), a.size(2)}, {0, a.stride(1), a.stride(2)}, a.offset());
  }
  Tensor b = args.trans_b ? operand(B, N, K, layout_b, dt, seed + 1)
                          : operand(B, K, N, layout_b, dt, seed + 1);
  Tensor out =
      out_col_major ? operand(B, M, N, 1, dt, seed + 2) : operand(B, M, N, 0, dt, seed + 2);
  Tensor bias;
  if (args.bias) {  // a strided bias (every other element)
    bias = make({2 * N}, uniform_values(2 * N, seed + 3, -1, 1), dt).as_strided_raw({N}, {2}, 0);
    args.bias = &bias;
  }
  const std::vector<double> expected = ref_gemm(a, b, out, args);
  if (path == Path::onednn) {
    ASSERT_TRUE(backend::cpu::onednn_gemm(cpu(), a, b, out, args))
        << "oneDNN's " << dtype_name(dt) << " GEMM declined M=" << M << " N=" << N << " K=" << K;
  } else {
    cpu().gemm(a, b, out, args);
  }
  EXPECT_TRUE(close(read(out), rounded(expected, dt), rtol, atol,
                    "gemm " + std::string(dtype_name(dt)) + " ta=" + std::to_string(args.trans_a) +
                        " tb=" + std::to_string(args.trans_b) + " la=" + std::to_string(layout_a) +
                        " lb=" + std::to_string(layout_b) + " out_cm=" +
                        std::to_string(out_col_major) + " bcast=" + std::to_string(broadcast_a)));
}

// Every transpose and operand layout, column-major outputs, broadcast and odd-sized batches.
void layout_cases(DType dt, double rtol, double atol, uint64_t seed, Path path) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      GemmArgs args;
      args.trans_a = ta;
      args.trans_b = tb;
      for (int la = 0; la < 4; ++la) {
        for (int lb = 0; lb < 4; ++lb) {
          run_case(3, 13, 17, 11, args, dt, la, lb, false, false, seed, rtol, atol, path);
        }
      }
      run_case(4, 65, 33, 47, args, dt, 0, 1, true, true, seed, rtol, atol, path);
      run_case(2, 7, 130, 70, args, dt, 2, 0, false, true, seed, rtol, atol, path);
      run_case(1, 1, 129, 257, args, dt, 0, 0, false, false, seed, rtol, atol, path);
    }
  }
}

TEST(BackendGemm, TransposesLayoutsAndBroadcastBatches) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  layout_cases(DType::f64, 1e-12, 1e-12, seed, Path::backend);
  layout_cases(DType::f32, 1e-5, 1e-5, seed, Path::backend);
}

TEST(BackendGemm, AlphaBetaBiasAndActivationEpilogues) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (DType dt : {DType::f64, DType::f32}) {
    const double rtol = dt == DType::f64 ? 1e-12 : 1e-5, atol = dt == DType::f64 ? 1e-12 : 1e-5;
    for (Activation act :
         {Activation::none, Activation::relu, Activation::gelu, Activation::gelu_tanh}) {
      for (bool with_bias : {false, true}) {
        GemmArgs args;
        args.alpha = 0.5;
        args.beta = 1.5;
        args.activation = act;
        Tensor dummy;
        if (with_bias) args.bias = &dummy;  // run_case substitutes a real bias
        run_case(2, 31, 45, 19, args, dt, 0, 0, false, false, seed, rtol, atol);
        run_case(2, 31, 45, 19, args, dt, 1, 2, true, false, seed, rtol, atol);
        args.trans_b = true;
        args.beta = 0;
        run_case(1, 64, 128, 96, args, dt, 0, 0, false, false, seed, rtol, atol);
      }
    }
  }
}

TEST(BackendGemm, HalfTypesTwoDimensionalSmallBatchesAndEmptyK) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  for (DType dt : {DType::f16, DType::bf16}) {
    GemmArgs args;
    Tensor dummy;
    args.bias = &dummy;
    args.activation = Activation::gelu;
    args.trans_b = true;
    run_case(3, 20, 24, 32, args, dt, 0, 0, false, true, seed, rtol_for(dt), 2e-2);
  }
  // Many tiny matrices (the batch-parallel path).
  GemmArgs args;
  run_case(40, 8, 8, 8, args, DType::f32, 0, 1, false, false, seed, 1e-5, 1e-6);
  // 2-D operands.
  Tensor a = make({5, 3}, uniform_values(15, seed, -1, 1), DType::f64);
  Tensor b = make({3, 4}, uniform_values(12, seed + 1, -1, 1), DType::f64);
  Tensor out = poisoned({5, 4}, DType::f64);
  const std::vector<double> expected =
      ref_gemm(a, b, make({5, 4}, std::vector<double>(20, 0), DType::f64), args);
  cpu().gemm(a, b, out, args);
  EXPECT_TRUE(close(read(out), expected, 1e-12, 1e-14, "2-D"));
  // K = 0: out = beta * out, then the epilogue.
  Tensor ea = empty({2, 3, 0}, {DType::f32, Device::cpu(), false});
  Tensor eb = empty({2, 0, 4}, {DType::f32, Device::cpu(), false});
  Tensor eo = make({2, 3, 4}, std::vector<double>(24, 2.0), DType::f32);
  GemmArgs kargs;
  kargs.beta = 0.5;
  kargs.activation = Activation::relu;
  cpu().gemm(ea, eb, eo, kargs);
  EXPECT_TRUE(close(read(eo), std::vector<double>(24, 1.0), 0, 0, "K = 0"));
}

// Whether bf16 GEMMs should run natively here: oneDNN in the build, bf16 dot-product instructions
// in the CPU, and no ONEDNN_MAX_CPU_ISA below them (the fallback test sets AVX2).
bool native_bf16_expected() {
  __builtin_cpu_init();
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  const bool capped = cap != nullptr && std::string(cap).find("BF16") == std::string::npos &&
                      std::string(cap).find("AMX") == std::string::npos &&
                      std::string(cap) != "ALL";
  return GRADUS_TEST_HAS_ONEDNN && __builtin_cpu_supports("avx512bf16") && !capped;
}

// Whether float32 GEMMs should run on oneDNN here: oneDNN in the build, AVX-512 (oneDNN's
// avx512_core: F, BW, VL, DQ) in the CPU, and no ONEDNN_MAX_CPU_ISA below it.
bool onednn_f32_expected() {
  __builtin_cpu_init();
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  const bool capped = cap != nullptr && std::string(cap).find("AVX512_CORE") == std::string::npos &&
                      std::string(cap) != "ALL";
  return GRADUS_TEST_HAS_ONEDNN && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && !capped;
}

// onednn_gemm takes a small dt product exactly when `expected` says the process runs dt there.
void expect_onednn_takes(DType dt, bool expected) {
  const Tensor a = make({4, 8}, uniform_values(32, 1, -1, 1), dt);
  const Tensor b = make({8, 3}, uniform_values(24, 2, -1, 1), dt);
  Tensor out = poisoned({4, 3}, dt);
  EXPECT_EQ(backend::cpu::onednn_gemm(cpu(), a, b, out, GemmArgs{}), expected) << dtype_name(dt);
}

// oneDNN's GEMM alone (it must take every case) over the backend test's cases: every transpose
// and operand layout, column-major outputs, broadcast and odd-sized batches, then alpha, beta,
// bias and each activation (alpha only without a bias: with one, oneDNN would add the bias before
// scaling, so that case converts).
void onednn_cases(DType dt, double rtol, double atol, uint64_t seed) {
  layout_cases(dt, rtol, atol, seed, Path::onednn);
  for (Activation act :
       {Activation::none, Activation::relu, Activation::gelu, Activation::gelu_tanh}) {
    for (bool with_bias : {false, true}) {
      GemmArgs args;
      args.beta = 1.5;
      args.alpha = with_bias ? 1.0 : 0.5;
      args.activation = act;
      Tensor dummy;
      if (with_bias) args.bias = &dummy;  // run_case substitutes a real (strided) bias
      run_case(2, 31, 45, 19, args, dt, 0, 0, false, false, seed, rtol, atol, Path::onednn);
      run_case(2, 31, 45, 19, args, dt, 1, 2, true, false, seed, rtol, atol, Path::onednn);
      args.trans_b = true;
      args.beta = 0;
      run_case(1, 64, 128, 96, args, dt, 0, 0, false, false, seed, rtol, atol, Path::onednn);
    }
  }
}

TEST(BackendOnednnGemm, Float32TakesOneDnnExactlyWhereTheCpuHasAvx512) {
  EXPECT_EQ(backend::cpu::onednn_f32_gemm(), onednn_f32_expected())
      << backend::cpu::f32_gemm_description();
  EXPECT_EQ(cpu_kernels_info().onednn_f32_gemm, onednn_f32_expected());
  expect_onednn_takes(DType::f32, onednn_f32_expected());
  // float64 and f16 never go to oneDNN.
  expect_onednn_takes(DType::f64, false);
  expect_onednn_takes(DType::f16, false);
}

// oneDNN's float32 GEMM over the backend test's cases, against float64 at float32's tolerance.
TEST(BackendOnednnGemm, Float32MatchesFloat64OverLayoutsAndEpilogues) {
  if (!onednn_f32_expected()) {
    GTEST_SKIP() << "float32 GEMMs run on OpenBLAS here (" << backend::cpu::f32_gemm_description()
                 << "); BackendGemm covers that path";
  }
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  onednn_cases(DType::f32, 1e-5, 1e-5, seed);
}

// Above the size where CpuBackend::gemm hands float32 to oneDNN, the product does not depend on
// the thread count (no split of K across threads): what lets a run resume bitwise, and a layout
// match one process, whatever the threads.
TEST(BackendOnednnGemm, Float32ProductsAreTheSameAtEveryThreadCount) {
  if (!onednn_f32_expected()) GTEST_SKIP() << backend::cpu::f32_gemm_description();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const int saved = get_num_threads();
  for (const auto& [m, n, k] : std::vector<std::array<int64_t, 3>>{
           {1024, 64, 256}, {64, 64, 4096}, {256, 704, 1024}, {8, 8, 20000}}) {
    const Tensor a = make({m, k}, uniform_values(m * k, seed, -1, 1), DType::f32);
    const Tensor b = make({k, n}, uniform_values(k * n, seed + 1, -1, 1), DType::f32);
    std::vector<std::vector<double>> products;
    for (int threads : {1, 2, 3, 4}) {
      set_num_threads(threads);
      Tensor out = poisoned({m, n}, DType::f32);
      ASSERT_TRUE(backend::cpu::onednn_gemm(cpu(), a, b, out, GemmArgs{}));
      products.push_back(read(out));
    }
    for (size_t t = 1; t < products.size(); ++t) {
      EXPECT_EQ(products[t], products[0])
          << m << "x" << n << "x" << k << " at " << t + 1 << " threads differs from 1 thread";
    }
  }
  set_num_threads(saved);
}

// balanced_sgemm (what CpuBackend::gemm runs a float32 product without an epilogue on, where the
// CPU has AVX-512): the product matches float64, and is bitwise the same at every thread count and
// every cut between the threads, even the most uneven; C is cut by rows when it is taller than
// wide, else by columns, and a product too narrow to cut runs on one thread.
TEST(BackendBalancedGemm, ProductDoesNotDependOnTheThreadsOrTheCut) {
  if (!onednn_f32_expected()) GTEST_SKIP() << backend::cpu::f32_gemm_description();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  struct Case {
    int64_t m, n, k;
    int a_layout, b_layout;
    double alpha, beta;
    bool trans_a, trans_b;
  };
  const Case cases[] = {
      {512, 96, 64, 0, 1, 1.0, 0.0, false, false},  // rows; column-major b
      {48, 400, 100, 2, 0, 0.5, 1.0, true, false},  // columns; a^T with a padded ld; beta
      {300, 200, 33, 1, 2, 1.0, 1.0, false, true},  // rows; odd sizes, b^T padded
      {8, 8, 4096, 0, 0, 1.0, 0.0, false, false}};  // too narrow to cut: one thread
  const int saved = get_num_threads();
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k));
    const Tensor a = c.trans_a ? operand(1, c.k, c.m, c.a_layout, DType::f32, seed)
                               : operand(1, c.m, c.k, c.a_layout, DType::f32, seed);
    const Tensor b = c.trans_b ? operand(1, c.n, c.k, c.b_layout, DType::f32, seed + 1)
                               : operand(1, c.k, c.n, c.b_layout, DType::f32, seed + 1);
    const Tensor out0 = make({1, c.m, c.n}, uniform_values(c.m * c.n, seed + 2, -1, 1), DType::f32);
    GemmArgs args;
    args.alpha = c.alpha;
    args.beta = c.beta;
    args.trans_a = c.trans_a;
    args.trans_b = c.trans_b;
    // beta = 0: C is not read, so NaN there must not show through.
    const auto product = [&](const std::vector<double>* shares) {
      Tensor out = c.beta == 0 ? poisoned({1, c.m, c.n}, DType::f32)
                               : make({1, c.m, c.n}, read(out0), DType::f32);
      if (shares == nullptr) {
        EXPECT_TRUE(backend::cpu::balanced_sgemm(a, b, out, args));
      } else {
        EXPECT_TRUE(backend::cpu::balanced_sgemm(a, b, out, args, *shares));
      }
      return read(out);
    };
    set_num_threads(1);
    const std::vector<double> one = product(nullptr);
    const std::vector<double> want = ref_gemm(a, b, out0, args);
    ASSERT_EQ(one.size(), want.size());
    // float32's rounding error grows like sqrt(k) over k random-signed products.
    const double tol = 1e-5 * std::sqrt(std::max(1.0, static_cast<double>(c.k) / 64));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(one[i], want[i], tol * (1 + std::abs(want[i]))) << "element " << i;
    }
    for (int threads : {2, 3, 4}) {
      set_num_threads(threads);
      EXPECT_EQ(product(nullptr), one) << threads << " threads, measured cut";
      std::vector<double> uneven(threads, 0.9 / (threads - 1));  // the first thread slow
      uneven[0] = 0.1;
      std::vector<double> lopsided(threads, 0.01 / (threads - 1));  // the first does nearly all
      lopsided[0] = 0.99;
      EXPECT_EQ(product(&uneven), one) << threads << " threads, first thread 10%";
      EXPECT_EQ(product(&lopsided), one) << threads << " threads, first thread 99%";
    }
  }
  set_num_threads(saved);
}

// The shares follow the measured speeds: halfway to each thread's part of the team's speed per
// timed product, never below a tenth of an even share, untouched by a timing with a zero.
TEST(BackendBalancedGemm, SharesFollowTheMeasuredSpeeds) {
  backend::cpu::balanced_gemm_shares(1);  // a team of a new size starts even
  std::vector<double> shares = backend::cpu::balanced_gemm_shares(2);
  ASSERT_EQ(shares, (std::vector<double>{0.5, 0.5}));
  // Thread 0 computed as many rows as thread 1 in half the time: twice as fast, 2/3 of the speed.
  backend::cpu::record_balanced_gemm_timing({512, 512}, {0.001, 0.002});
  shares = backend::cpu::balanced_gemm_shares(2);
  EXPECT_NEAR(shares[0], 0.5 * 0.5 + 0.5 * 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(shares[0] + shares[1], 1.0, 1e-12);
  backend::cpu::record_balanced_gemm_timing({512, 512}, {0.0, 0.002});
  EXPECT_EQ(backend::cpu::balanced_gemm_shares(2), shares);  // a zero time is no measurement
  for (int i = 0; i < 40; ++i) {
    backend::cpu::record_balanced_gemm_timing({960, 64}, {0.001, 10.0});  // thread 1 crawls
  }
  shares = backend::cpu::balanced_gemm_shares(2);
  EXPECT_GT(shares[1], 0.04);  // the floor: a tenth of an even share, then normalised
  EXPECT_LT(shares[1], 0.06);
  backend::cpu::balanced_gemm_shares(1);  // leave the next products an even start
}

TEST(BackendHalfGemm, TakesTheNativePathExactlyWhereTheCpuHasBf16) {
  EXPECT_EQ(backend::cpu::native_bf16_gemm(), native_bf16_expected())
      << backend::cpu::half_gemm_description();
  EXPECT_EQ(cpu_kernels_info().native_bf16_gemm, native_bf16_expected());
  expect_onednn_takes(DType::bf16, native_bf16_expected());
}

// The native bf16 GEMM over the backend test's cases: every transpose and operand layout,
// column-major outputs, broadcast and odd-sized batches, alpha/beta, bias and activations.
TEST(BackendHalfGemm, NativeBf16MatchesFloat64OverLayoutsAndEpilogues) {
  if (!native_bf16_expected()) {
    GTEST_SKIP() << "bf16 GEMMs convert to float32 here (" << backend::cpu::half_gemm_description()
                 << "); BackendGemm covers that path";
  }
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  const DType dt = DType::bf16;
  const double rtol = rtol_for(dt), atol = 1e-2;
  onednn_cases(dt, rtol, atol, seed);
  // alpha with a bias, and K = 0, go to the float32 path (through the backend's gemm).
  GemmArgs scaled;
  scaled.alpha = 0.5;
  Tensor dummy;
  scaled.bias = &dummy;
  run_case(2, 9, 10, 11, scaled, dt, 0, 0, false, false, seed, rtol, atol);
}

// Threads calling the native GEMM at once, with shapes that share and do not share cached
// primitives, each get their own product.
TEST(BackendHalfGemm, ConcurrentCallersGetTheirOwnProducts) {
  if (!native_bf16_expected()) GTEST_SKIP() << backend::cpu::half_gemm_description();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  constexpr int kThreads = 4, kCalls = 20;
  std::vector<std::vector<Tensor>> a(kThreads), b(kThreads), out(kThreads);
  std::vector<std::vector<std::vector<double>>> expected(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int c = 0; c < kCalls; ++c) {
      const int64_t m = 16 + (t % 2) * 8 + c % 3, n = 24, k = 40;  // threads 0/2, 1/3 share
      const uint64_t s = seed + static_cast<uint64_t>(100 * t + c);
      a[t].push_back(make({m, k}, uniform_values(m * k, s, -1, 1), DType::bf16));
      b[t].push_back(make({k, n}, uniform_values(k * n, s + 7, -1, 1), DType::bf16));
      out[t].push_back(poisoned({m, n}, DType::bf16));
      expected[t].push_back(
          rounded(ref_gemm(a[t].back(), b[t].back(), out[t].back(), GemmArgs{}), DType::bf16));
    }
  }
  std::vector<int> handled(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        handled[t] += backend::cpu::onednn_gemm(cpu(), a[t][c], b[t][c], out[t][c], {});
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(handled[t], kCalls);
    for (int c = 0; c < kCalls; ++c) {
      EXPECT_TRUE(close(read(out[t][c]), expected[t][c], rtol_for(DType::bf16), 1e-2,
                        "thread " + std::to_string(t) + " call " + std::to_string(c)));
    }
  }
}

}  // namespace
}  // namespace gradus::backend_test
