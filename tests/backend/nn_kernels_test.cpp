// The CPU backend's fused NN kernels (softmax, cross-entropy, layer/batch norm, conv2d, pooling)
// called directly, against naive float64 references written here: direct 7-loop convolution,
// naive pooling with PyTorch's window rules, and finite differences of the naive forwards for the
// backwards. Inputs are fresh random values each run; outputs are poisoned with NaN first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/half_conv.h"
#include "backend/cpu/onednn_gemm.h"
#include "gradus/core/host_memory.h"
#include "gradus/gradus.h"
#include "support/test_util.h"

namespace gradus {
namespace {

using backend::Backend;
using Vec = std::vector<double>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Backend& cpu() {
  return backend::backend_for(DeviceType::CPU);
}

// ------------------------------------------------------------------------------------ helpers
Vec random_vec(size_t n, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// A contiguous tensor of `dtype` holding v (rounded to the dtype).
Tensor make(const Shape& shape, const Vec& v, DType dtype = DType::f64) {
  Tensor t = empty(shape, {dtype, Device::cpu()});
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  if (dtype == DType::f64) {
    std::copy(v.begin(), v.end(), t.data_ptr<double>());
  } else if (dtype == DType::f32) {
    float* p = t.data_ptr<float>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<float>(v[i]);
  } else if (dtype == DType::bf16) {
    BFloat16* p = t.data_ptr<BFloat16>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = BFloat16(static_cast<float>(v[i]));
  } else {
    Half* p = t.data_ptr<Half>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = Half(static_cast<float>(v[i]));
  }
  return t;
}

// An output tensor filled with NaN so unwritten elements show up.
Tensor poisoned(const Shape& shape, DType dtype = DType::f64) {
  return make(shape, Vec(static_cast<size_t>(shape_numel(shape)), kNaN), dtype);
}

Vec values(const Tensor& t) {
  Vec v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t.dtype()) {
      case DType::f64:
        v[i] = t.data_ptr<double>()[i];
        break;
      case DType::f32:
        v[i] = t.data_ptr<float>()[i];
        break;
      case DType::bf16:
        v[i] = static_cast<float>(t.data_ptr<BFloat16>()[i]);
        break;
      case DType::f16:
        v[i] = static_cast<float>(t.data_ptr<Half>()[i]);
        break;
      default:
        ADD_FAILURE() << "unexpected dtype";
    }
  }
  return v;
}

// v rounded through `dtype` (the reference sees exactly the kernel's inputs).
Vec rounded(const Vec& v, DType dtype) {
  return values(make({static_cast<int64_t>(v.size())}, v, dtype));
}

::testing::AssertionResult close(const Vec& actual, const Vec& expected, double rtol, double atol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (std::isnan(e) && std::isnan(a)) continue;
    if (std::isinf(e) && a == e) continue;
    if (!(std::abs(a - e) <= atol + rtol * std::abs(e)))
      return ::testing::AssertionFailure() << "element " << i << ": " << a << " vs expected " << e
                                           << " (rtol " << rtol << ", atol " << atol << ")";
  }
  return ::testing::AssertionSuccess();
}

// Central differences of f(x) . g with respect to x.
Vec numeric_grad(const std::function<Vec(const Vec&)>& f, Vec x, const Vec& g, double eps = 1e-6) {
  Vec grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + eps;
    const Vec up = f(x);
    x[i] = keep - eps;
    const Vec down = f(x);
    x[i] = keep;
    double s = 0;
    for (size_t j = 0; j < g.size(); ++j) s += (up[j] - down[j]) * g[j];
    grad[i] = s / (2 * eps);
  }
  return grad;
}

// Runs body with several OpenMP thread counts (the kernels split work differently per count).
void for_thread_counts(const std::function<void()>& body) {
  const int keep = get_num_threads();
  for (int t : {1, 2, 3}) {
    SCOPED_TRACE("threads " + std::to_string(t));
    set_num_threads(t);
    body();
  }
  set_num_threads(keep);
}

// Runs body with each copy of the convolution kernels: AVX-512 (where the CPU has it) and the
// build's own ISA (GRADUS_CONV_ISA=base, read by the kernels on every call).
void for_conv_isas(const std::function<void()>& body) {
  for (const char* isa : {"", "base"}) {
    SCOPED_TRACE(std::string("GRADUS_CONV_ISA=") + isa);
    if (*isa) {
      setenv("GRADUS_CONV_ISA", isa, 1);
    } else {
      unsetenv("GRADUS_CONV_ISA");
    }
    body();
  }
  unsetenv("GRADUS_CONV_ISA");
}

// ------------------------------------------------------------------------------ softmax tests
Vec ref_softmax(const Vec& x, int64_t rows, int64_t cols, bool log) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, x[r * cols + c]);
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - mx);
    for (int64_t c = 0; c < cols; ++c) {
      const double v = x[r * cols + c] - mx;
      y[r * cols + c] = log ? v - std::log(s) : std::exp(v) / s;
    }
  }
  return y;
}

TEST(NnKernels, SoftmaxAndLogSoftmaxMatchReferenceAndFiniteDifferences) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (bool log : {false, true}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {5, 33}, {2, 130}}) {
      SCOPED_TRACE(std::string(log ? "log_softmax " : "softmax ") + std::to_string(rows) + "x" +
                   std::to_string(cols));
      const Vec x = random_vec(static_cast<size_t>(rows * cols), rng, -8, 8);
      const Vec g = random_vec(x.size(), rng);
      const Vec yref = ref_softmax(x, rows, cols, log);
      Tensor y = poisoned({rows, cols});
      cpu().softmax(make({rows, cols}, x), y, log);
      EXPECT_TRUE(close(values(y), yref, 1e-12, 1e-14));
      Tensor gx = poisoned({rows, cols});
      cpu().softmax_backward(make({rows, cols}, g), y, gx, log);
      const Vec num =
          numeric_grad([&](const Vec& v) { return ref_softmax(v, rows, cols, log); }, x, g);
      EXPECT_TRUE(close(values(gx), num, 1e-6, 1e-8));
      // float32 against the float64 reference on the same (rounded) inputs.
      const Vec xf = rounded(x, DType::f32);
      Tensor yf = poisoned({rows, cols}, DType::f32);
      cpu().softmax(make({rows, cols}, xf, DType::f32), yf, log);
      // log-softmax: x - (max + log sum) carries float32 rounding of |x| ~ 8 (about 1e-6).
      EXPECT_TRUE(close(values(yf), ref_softmax(xf, rows, cols, log), 2e-6, log ? 4e-6 : 1e-7));
    }
  }
}

TEST(NnKernels, SoftmaxLargeLogitsAndHalfTypes) {
  // Stable: logits far above exp's range still give exact probabilities.
  Tensor y = poisoned({1, 3});
  cpu().softmax(make({1, 3}, {1000.0, 1000.0 + std::log(3.0), -1000.0}), y, false);
  EXPECT_TRUE(close(values(y), {0.25, 0.75, 0.0}, 1e-12, 1e-300));
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (DType dt : {DType::bf16, DType::f16}) {
    const Vec x = rounded(random_vec(4 * 19, rng, -4, 4), dt);
    Tensor out = poisoned({4, 19}, dt);
    cpu().softmax(make({4, 19}, x, dt), out, true);
    EXPECT_TRUE(
        close(values(out), ref_softmax(x, 4, 19, true), dt == DType::bf16 ? 1.6e-2 : 2e-3, 1e-3));
  }
}

// ------------------------------------------------------------------------ cross-entropy tests
struct CeCase {
  int64_t N, C;
  bool weighted;
  double ls;
  int64_t ignore_index;
};

Vec ref_ce(const Vec& x, const std::vector<int64_t>& t, const Vec* w, const CeCase& k,
           Vec* lse = nullptr) {
  Vec loss(static_cast<size_t>(k.N));
  for (int64_t i = 0; i < k.N; ++i) {
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < k.C; ++c) mx = std::max(mx, x[i * k.C + c]);
    for (int64_t c = 0; c < k.C; ++c) s += std::exp(x[i * k.C + c] - mx);
    const double l = mx + std::log(s);
    if (lse) (*lse)[i] = l;
    if (t[i] == k.ignore_index) continue;
    const auto wc = [&](int64_t c) { return w ? (*w)[c] : 1.0; };
    double smooth = 0;
    for (int64_t c = 0; c < k.C; ++c) smooth += wc(c) * (x[i * k.C + c] - l);
    loss[i] = -(1 - k.ls) * wc(t[i]) * (x[i * k.C + t[i]] - l) - k.ls / k.C * smooth;
  }
  return loss;
}

TEST(NnKernels, CrossEntropyWeightsSmoothingIgnoreIndex) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const CeCase cases[] = {{1, 1, false, 0.0, -100}, {6, 5, false, 0.0, -100},
                          {7, 10, true, 0.0, 3},    {9, 4, false, 0.2, -100},
                          {8, 37, true, 0.1, 2},    {5, 3, true, 1.0, -100}};
  for (const CeCase& k : cases) {
    SCOPED_TRACE("N " + std::to_string(k.N) + " C " + std::to_string(k.C) + " ls " +
                 std::to_string(k.ls));
    const Vec x = random_vec(static_cast<size_t>(k.N * k.C), rng, -5, 5);
    const Vec w = random_vec(static_cast<size_t>(k.C), rng, 0.1, 2.0);
    std::vector<int64_t> t(static_cast<size_t>(k.N));
    std::uniform_int_distribution<int64_t> pick(0, k.C - 1);
    for (auto& v : t) v = pick(rng);
    if (k.ignore_index >= 0 && k.ignore_index < k.C)
      t[0] = k.ignore_index;  // at least one ignored row
    Tensor target = empty({k.N}, {DType::i64, Device::cpu()});
    std::copy(t.begin(), t.end(), target.data_ptr<int64_t>());
    const Vec* wp = k.weighted ? &w : nullptr;
    Tensor wt = k.weighted ? make({k.C}, w) : Tensor();
    Vec lse_ref(static_cast<size_t>(k.N));
    const Vec loss_ref = ref_ce(x, t, wp, k, &lse_ref);

    Tensor logits = make({k.N, k.C}, x), loss = poisoned({k.N}), lse = poisoned({k.N});
    cpu().cross_entropy(logits, target, wt, k.ignore_index, k.ls, loss, lse);
    EXPECT_TRUE(close(values(loss), loss_ref, 1e-12, 1e-13));
    EXPECT_TRUE(close(values(lse), lse_ref, 1e-12, 1e-13));

    const Vec g = random_vec(static_cast<size_t>(k.N), rng);
    Tensor gx = poisoned({k.N, k.C});
    cpu().cross_entropy_backward(make({k.N}, g), logits, target, wt, k.ignore_index, k.ls, lse, gx);
    const Vec num = numeric_grad([&](const Vec& v) { return ref_ce(v, t, wp, k); }, x, g);
    EXPECT_TRUE(close(values(gx), num, 1e-6, 1e-8));
    if (t[0] == k.ignore_index) {
      for (int64_t c = 0; c < k.C; ++c) EXPECT_EQ(values(gx)[c], 0.0);
    }

    // float32 path.
    const Vec xf = rounded(x, DType::f32), wf = rounded(w, DType::f32);
    Tensor lossf = poisoned({k.N}, DType::f32), lsef = poisoned({k.N}, DType::f32);
    Tensor wtf = k.weighted ? make({k.C}, wf, DType::f32) : Tensor();
    cpu().cross_entropy(make({k.N, k.C}, xf, DType::f32), target, wtf, k.ignore_index, k.ls, lossf,
                        lsef);
    EXPECT_TRUE(close(values(lossf), ref_ce(xf, t, k.weighted ? &wf : nullptr, k), 1e-5, 1e-5));
  }
}

TEST(NnKernels, CrossEntropyOutOfRangeTargetDoesNotCrash) {
  Tensor target = empty({2}, {DType::i64, Device::cpu()});
  target.data_ptr<int64_t>()[0] = 7;  // C = 3
  target.data_ptr<int64_t>()[1] = -5;
  Tensor logits = make({2, 3}, {0.1, 0.2, 0.3, 0.4, 0.5, 0.6}), loss = poisoned({2}),
         lse = poisoned({2});
  cpu().cross_entropy(logits, target, Tensor(), -100, 0.0, loss, lse);
  Tensor gx = poisoned({2, 3});
  cpu().cross_entropy_backward(make({2}, {1.0, 1.0}), logits, target, Tensor(), -100, 0.0, lse, gx);
  EXPECT_TRUE(std::isnan(values(loss)[0]));  // flagged, not silently a number
  EXPECT_NEAR(values(lse)[0], std::log(std::exp(0.1) + std::exp(0.2) + std::exp(0.3)), 1e-12);
}

// --------------------------------------------------------------------------- layer norm tests
Vec ref_layer_norm(const Vec& x, const Vec* w, const Vec* b, int64_t rows, int64_t cols, double eps,
                   Vec* mean = nullptr, Vec* rstd = nullptr) {
  Vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < cols; ++c) m += x[r * cols + c];
    m /= cols;
    for (int64_t c = 0; c < cols; ++c) v += (x[r * cols + c] - m) * (x[r * cols + c] - m);
    v /= cols;
    const double rs = 1 / std::sqrt(v + eps);
    if (mean) (*mean)[r] = m;
    if (rstd) (*rstd)[r] = rs;
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = (x[r * cols + c] - m) * rs * (w ? (*w)[c] : 1.0) + (b ? (*b)[c] : 0.0);
  }
  return y;
}

TEST(NnKernels, LayerNormForwardAndBackward) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const double eps = 1e-5;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {4, 9}, {3, 300}, {33, 5}}) {
    for (bool affine : {true, false}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) + (affine ? " affine" : ""));
      const Vec x = random_vec(static_cast<size_t>(rows * cols), rng, -3, 3);
      const Vec w = random_vec(static_cast<size_t>(cols), rng, 0.5, 1.5);
      const Vec b = random_vec(static_cast<size_t>(cols), rng);
      const Vec* wp = affine ? &w : nullptr;
      const Vec* bp = affine ? &b : nullptr;
      Vec mref(static_cast<size_t>(rows)), rref(static_cast<size_t>(rows));
      const Vec yref = ref_layer_norm(x, wp, bp, rows, cols, eps, &mref, &rref);
      Tensor xt = make({rows, cols}, x), wt = affine ? make({cols}, w) : Tensor();
      Tensor bt = affine ? make({cols}, b) : Tensor();
      Tensor y = poisoned({rows, cols}), mean = poisoned({rows}), rstd = poisoned({rows});
      cpu().layer_norm(xt, wt, bt, eps, y, mean, rstd);
      EXPECT_TRUE(close(values(y), yref, 1e-10, 1e-12));
      EXPECT_TRUE(close(values(mean), mref, 1e-12, 1e-14));
      EXPECT_TRUE(close(values(rstd), rref, 1e-10, 1e-12));

      const Vec g = random_vec(x.size(), rng);
      Tensor gx = poisoned({rows, cols});
      Tensor gw = affine ? poisoned({cols}) : Tensor(), gb = affine ? poisoned({cols}) : Tensor();
      cpu().layer_norm_backward(make({rows, cols}, g), xt, wt, mean, rstd, gx, gw, gb);
      const Vec nx = numeric_grad(
          [&](const Vec& v) { return ref_layer_norm(v, wp, bp, rows, cols, eps); }, x, g);
      EXPECT_TRUE(close(values(gx), nx, 1e-5, 1e-7));
      if (affine) {
        const Vec nw = numeric_grad(
            [&](const Vec& v) { return ref_layer_norm(x, &v, bp, rows, cols, eps); }, w, g);
        const Vec nb = numeric_grad(
            [&](const Vec& v) { return ref_layer_norm(x, wp, &v, rows, cols, eps); }, b, g);
        EXPECT_TRUE(close(values(gw), nw, 1e-6, 1e-7));
        EXPECT_TRUE(close(values(gb), nb, 1e-6, 1e-7));
      }
      // float32 forward.
      const Vec xf = rounded(x, DType::f32);
      Tensor yf = poisoned({rows, cols}, DType::f32), mf = poisoned({rows}, DType::f32),
             rf = poisoned({rows}, DType::f32);
      cpu().layer_norm(make({rows, cols}, xf, DType::f32), Tensor(), Tensor(), eps, yf, mf, rf);
      EXPECT_TRUE(
          close(values(yf), ref_layer_norm(xf, nullptr, nullptr, rows, cols, eps), 1e-5, 2e-5));
    }
  }
}

// --------------------------------------------------------------------------- batch norm tests
// x [N, C, S]; training uses batch statistics.
Vec ref_batch_norm(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C, int64_t S,
                   double eps, Vec* mean = nullptr, Vec* var = nullptr) {
  Vec y(x.size());
  for (int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) m += x[(n * C + c) * S + s];
    m /= N * S;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) v += std::pow(x[(n * C + c) * S + s] - m, 2);
    v /= N * S;
    if (mean) (*mean)[c] = m;
    if (var) (*var)[c] = v;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s)
        y[(n * C + c) * S + s] = (x[(n * C + c) * S + s] - m) / std::sqrt(v + eps) * w[c] + b[c];
  }
  return y;
}

TEST(NnKernels, BatchNormTrainingEvalAndBackward) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const double eps = 1e-5, momentum = 0.1;
  for (auto [N, C, S] :
       {std::tuple<int64_t, int64_t, int64_t>{2, 3, 5}, {1, 4, 7}, {5, 2, 1}, {3, 1, 12}}) {
    SCOPED_TRACE("N " + std::to_string(N) + " C " + std::to_string(C) + " S " + std::to_string(S));
    const Vec x = random_vec(static_cast<size_t>(N * C * S), rng, -2, 3);
    const Vec w = random_vec(static_cast<size_t>(C), rng, 0.5, 1.5),
              b = random_vec(static_cast<size_t>(C), rng);
    const Vec rm0 = random_vec(static_cast<size_t>(C), rng),
              rv0 = random_vec(static_cast<size_t>(C), rng, 0.5, 2);
    Vec mref(static_cast<size_t>(C)), vref(static_cast<size_t>(C));
    const Vec yref = ref_batch_norm(x, w, b, N, C, S, eps, &mref, &vref);
    Tensor xt = make({N, C, S}, x), wt = make({C}, w), bt = make({C}, b);
    Tensor rm = make({C}, rm0), rv = make({C}, rv0);
    Tensor y = poisoned({N, C, S}), sm = poisoned({C}), sr = poisoned({C});
    cpu().batch_norm(xt, wt, bt, rm, rv, true, momentum, eps, y, sm, sr);
    EXPECT_TRUE(close(values(y), yref, 1e-10, 1e-12));
    Vec rstd_ref(static_cast<size_t>(C)), rm_ref(static_cast<size_t>(C)),
        rv_ref(static_cast<size_t>(C));
    const double M = static_cast<double>(N * S);
    for (int64_t c = 0; c < C; ++c) {
      rstd_ref[c] = 1 / std::sqrt(vref[c] + eps);
      rm_ref[c] = (1 - momentum) * rm0[c] + momentum * mref[c];
      rv_ref[c] = (1 - momentum) * rv0[c] + momentum * vref[c] * M / (M - 1);  // unbiased
    }
    EXPECT_TRUE(close(values(sm), mref, 1e-12, 1e-14));
    EXPECT_TRUE(close(values(sr), rstd_ref, 1e-10, 1e-12));
    EXPECT_TRUE(close(values(rm), rm_ref, 1e-12, 1e-14));
    EXPECT_TRUE(close(values(rv), rv_ref, 1e-12, 1e-14));

    const Vec g = random_vec(x.size(), rng);
    Tensor gx = poisoned({N, C, S}), gw = poisoned({C}), gb = poisoned({C});
    cpu().batch_norm_backward(make({N, C, S}, g), xt, wt, sm, sr, gx, gw, gb);
    const auto fx = [&](const Vec& v) { return ref_batch_norm(v, w, b, N, C, S, eps); };
    const auto fw = [&](const Vec& v) { return ref_batch_norm(x, v, b, N, C, S, eps); };
    const auto fb = [&](const Vec& v) { return ref_batch_norm(x, w, v, N, C, S, eps); };
    EXPECT_TRUE(close(values(gx), numeric_grad(fx, x, g), 1e-5, 1e-6));
    EXPECT_TRUE(close(values(gw), numeric_grad(fw, w, g), 1e-6, 1e-7));
    EXPECT_TRUE(close(values(gb), numeric_grad(fb, b, g), 1e-6, 1e-7));

    // Eval: running statistics, nothing updated, save_* untouched.
    Tensor ye = poisoned({N, C, S}), sm2 = poisoned({C}), sr2 = poisoned({C});
    Tensor rm2 = make({C}, rm0), rv2 = make({C}, rv0);
    cpu().batch_norm(xt, wt, bt, rm2, rv2, false, momentum, eps, ye, sm2, sr2);
    Vec yeref(x.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t s = 0; s < S; ++s) {
          const size_t i = static_cast<size_t>((n * C + c) * S + s);
          yeref[i] = (x[i] - rm0[c]) / std::sqrt(rv0[c] + eps) * w[c] + b[c];
        }
    EXPECT_TRUE(close(values(ye), yeref, 1e-12, 1e-13));
    EXPECT_TRUE(close(values(rm2), rm0, 0, 0));
    EXPECT_TRUE(close(values(rv2), rv0, 0, 0));
    EXPECT_TRUE(std::isnan(values(sm2)[0]));

    // No affine parameters, no running stats, float32.
    const Vec xf = rounded(x, DType::f32);
    Tensor yf = poisoned({N, C, S}, DType::f32), smf = poisoned({C}, DType::f32),
           srf = poisoned({C}, DType::f32);
    cpu().batch_norm(make({N, C, S}, xf, DType::f32), Tensor(), Tensor(), Tensor(), Tensor(), true,
                     momentum, eps, yf, smf, srf);
    const Vec ones(static_cast<size_t>(C), 1.0), zeros(static_cast<size_t>(C), 0.0);
    EXPECT_TRUE(close(values(yf), ref_batch_norm(xf, ones, zeros, N, C, S, eps), 1e-4, 1e-4));
  }
}

// ---------------------------------------------------------------------------------- conv2d
struct ConvCase {
  int64_t N, C, H, W, O, KH, KW, sh, sw, ph, pw, dh, dw, G;
  bool bias;
  int64_t OH() const { return (H + 2 * ph - dh * (KH - 1) - 1) / sh + 1; }
  int64_t OW() const { return (W + 2 * pw - dw * (KW - 1) - 1) / sw + 1; }
  backend::Conv2dArgs args() const { return {sh, sw, ph, pw, dh, dw, G}; }
  std::string str() const {
    return "x [" + std::to_string(N) + "," + std::to_string(C) + "," + std::to_string(H) + "," +
           std::to_string(W) + "] O " + std::to_string(O) + " k " + std::to_string(KH) + "x" +
           std::to_string(KW) + " s " + std::to_string(sh) + "," + std::to_string(sw) + " p " +
           std::to_string(ph) + "," + std::to_string(pw) + " d " + std::to_string(dh) + "," +
           std::to_string(dw) + " g " + std::to_string(G);
  }
};

// The direct 7-loop convolution and its adjoints (grad_x, grad_w, grad_b for upstream gy).
struct ConvRef {
  Vec y, gx, gw, gb;
};
ConvRef ref_conv(const ConvCase& k, const Vec& x, const Vec& w, const Vec& b, const Vec& gy) {
  const int64_t OH = k.OH(), OW = k.OW(), Cg = k.C / k.G, Og = k.O / k.G;
  ConvRef r{Vec(static_cast<size_t>(k.N * k.O * OH * OW)), Vec(x.size()), Vec(w.size()),
            Vec(static_cast<size_t>(k.O))};
  for (int64_t n = 0; n < k.N; ++n)
    for (int64_t o = 0; o < k.O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const size_t yi = static_cast<size_t>(((n * k.O + o) * OH + oh) * OW + ow);
          double s = k.bias ? b[o] : 0.0;
          r.gb[o] += gy[yi];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < k.KH; ++kh)
              for (int64_t kw = 0; kw < k.KW; ++kw) {
                const int64_t h = oh * k.sh - k.ph + kh * k.dh, ww = ow * k.sw - k.pw + kw * k.dw;
                if (h < 0 || h >= k.H || ww < 0 || ww >= k.W) continue;
                const size_t xi =
                    static_cast<size_t>(((n * k.C + (o / Og) * Cg + c) * k.H + h) * k.W + ww);
                const size_t wi = static_cast<size_t>(((o * Cg + c) * k.KH + kh) * k.KW + kw);
                s += x[xi] * w[wi];
                r.gx[xi] += w[wi] * gy[yi];
                r.gw[wi] += x[xi] * gy[yi];
              }
          r.y[yi] = s;
        }
  return r;
}

// native: only the native bf16 convolutions (oneDNN), which must take every case.
void check_conv(const ConvCase& k, DType dt, std::mt19937_64& rng, bool native = false) {
  SCOPED_TRACE(k.str() + " " + dtype_name(dt));
  const int64_t OH = k.OH(), OW = k.OW();
  const Shape xs{k.N, k.C, k.H, k.W}, ws{k.O, k.C / k.G, k.KH, k.KW}, ys{k.N, k.O, OH, OW};
  const Vec x = rounded(random_vec(static_cast<size_t>(shape_numel(xs)), rng), dt);
  const Vec w = rounded(random_vec(static_cast<size_t>(shape_numel(ws)), rng), dt);
  const Vec b = rounded(random_vec(static_cast<size_t>(k.O), rng), dt);
  const Vec gy = rounded(random_vec(static_cast<size_t>(shape_numel(ys)), rng), dt);
  const ConvRef r = ref_conv(k, x, w, b, gy);
  // Tolerance: sums of K products of values in [-1, 1] rounded to dt.
  const double K = static_cast<double>(k.C / k.G * k.KH * k.KW);
  const double tol = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 2e-6 : 1e-2;
  const double atol = tol * std::sqrt(std::max(K, static_cast<double>(k.N * OH * OW)));
  Tensor xt = make(xs, x, dt), wt = make(ws, w, dt), gyt = make(ys, gy, dt);
  if (native) {
    for_thread_counts([&] {
      Tensor y = poisoned(ys, dt);
      ASSERT_TRUE(backend::cpu::native_bf16_conv2d(
          cpu(), xt, wt, k.bias ? make({k.O}, b, dt) : Tensor(), y, k.args()));
      EXPECT_TRUE(close(values(y), r.y, tol, atol)) << "forward";
      Tensor gx = poisoned(xs, dt);
      ASSERT_TRUE(backend::cpu::native_bf16_conv2d_backward_data(cpu(), gyt, wt, gx, k.args()));
      EXPECT_TRUE(close(values(gx), r.gx, tol, atol)) << "backward data";
      Tensor gw = poisoned(ws, dt), gb = poisoned({k.O}, dt);
      ASSERT_TRUE(backend::cpu::native_bf16_conv2d_backward_weight(
          cpu(), gyt, xt, gw, k.bias ? gb : Tensor(), k.args()));
      EXPECT_TRUE(close(values(gw), r.gw, tol, atol)) << "backward weight";
      if (k.bias) {
        EXPECT_TRUE(close(values(gb), r.gb, tol, atol)) << "backward bias";
      }
    });
    return;
  }
  for_conv_isas([&] {
    for_thread_counts([&] {
      Tensor y = poisoned(ys, dt);
      cpu().conv2d(xt, wt, k.bias ? make({k.O}, b, dt) : Tensor(), y, k.args());
      EXPECT_TRUE(close(values(y), r.y, tol, atol)) << "forward";
      Tensor gx = poisoned(xs, dt);
      cpu().conv2d_backward_data(gyt, wt, gx, k.args());
      EXPECT_TRUE(close(values(gx), r.gx, tol, atol)) << "backward data";
      Tensor gw = poisoned(ws, dt), gb = poisoned({k.O}, dt);
      cpu().conv2d_backward_weight(gyt, xt, gw, k.bias ? gb : Tensor(), k.args());
      EXPECT_TRUE(close(values(gw), r.gw, tol, atol)) << "backward weight";
      if (k.bias) {
        EXPECT_TRUE(close(values(gb), r.gb, tol, atol)) << "backward bias";
      }
    });
  });
}

//                 N  C   H   W   O  KH KW sh sw ph pw dh dw G  bias
const ConvCase kConvCases[] = {
    {2, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},      // odd sizes, O < vector width
    {1, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},   // the CNN's first layer, batch 1
    {3, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},  // the CNN's second layer
    {2, 5, 11, 10, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, false},  // O = 70: 4 + 1 vector blocks
    {3, 4, 9, 8, 6, 3, 2, 2, 1, 1, 0, 1, 1, 1, true},      // stride 2 x 1
    {2, 6, 12, 11, 9, 3, 3, 2, 2, 2, 1, 1, 1, 3, true},    // groups 3, stride 2, pad > k-1 in h
    {2, 4, 13, 12, 8, 3, 3, 1, 1, 2, 2, 2, 2, 2, false},   // dilation 2, groups 2
    {1, 3, 8, 6, 5, 3, 2, 1, 1, 2, 1, 1, 1, 1, true},      // pad 2 > k-1: general backward
    {4, 8, 6, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, true},      // depthwise
    {2, 7, 5, 5, 12, 1, 1, 1, 1, 0, 0, 1, 1, 1, true},     // 1x1
    {2, 4, 9, 9, 6, 1, 1, 2, 2, 1, 1, 1, 1, 1, false},     // 1x1 stride 2 padded
    {5, 2, 6, 5, 3, 5, 4, 3, 2, 2, 3, 1, 2, 1, true},      // big kernel, mixed everything
    {2, 3, 4, 4, 4, 4, 4, 1, 1, 0, 0, 1, 1, 1, true},      // kernel = input: 1x1 output
    {2, 5, 7, 7, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},     // rows of 7: unit-stride tiles
    // Small reductions over long planes (the dot-product backward-weight path):
    {4, 2, 16, 12, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
    {3, 1, 13, 12, 10, 2, 2, 1, 1, 0, 1, 1, 1, 1, true},  // P = 156: a partial last vector
    {3, 4, 30, 20, 6, 3, 3, 2, 1, 1, 0, 1, 2, 2, false},  // groups, stride, dilation
};

TEST(NnKernels, Conv2dMatchesDirectConvolutionFloat64) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const ConvCase& k : kConvCases) check_conv(k, DType::f64, rng);
}

TEST(NnKernels, Conv2dMatchesDirectConvolutionFloat32) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const ConvCase& k : kConvCases) check_conv(k, DType::f32, rng);
}

TEST(NnKernels, Conv2dHalfTypesThroughTheBackend) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  check_conv({2, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, true}, DType::bf16, rng);
  check_conv({2, 4, 8, 6, 6, 3, 3, 2, 1, 1, 1, 1, 1, 2, true}, DType::f16, rng);
}

// The native bf16 convolutions over every case above, where this CPU runs them (gemm_test.cpp's
// BackendHalfGemm checks which path the process takes).
TEST(NnKernels, Conv2dNativeBf16MatchesDirectConvolution) {
  if (!backend::cpu::native_bf16_gemm()) {
    GTEST_SKIP() << "bf16 convolutions convert to float32 here ("
                 << backend::cpu::half_gemm_description() << "); the test above covers that path";
  }
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const ConvCase& k : kConvCases) check_conv(k, DType::bf16, rng, true);
}

// The native path's blocked copies and scratch are gradus tensors: they count in the memory
// statistics while the call runs, are freed after it, and a memory limit refuses them.
TEST(NnKernels, Conv2dNativeBf16BuffersCountAgainstTheMemoryLimit) {
  if (!backend::cpu::native_bf16_gemm()) GTEST_SKIP() << backend::cpu::half_gemm_description();
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const ConvCase k{3, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, true};
  const Shape xs{k.N, k.C, k.H, k.W}, ws{k.O, k.C, k.KH, k.KW}, ys{k.N, k.O, k.OH(), k.OW()};
  const Tensor x = make(xs, random_vec(static_cast<size_t>(shape_numel(xs)), rng), DType::bf16);
  const Tensor w = make(ws, random_vec(static_cast<size_t>(shape_numel(ws)), rng), DType::bf16);
  const Tensor b = make({k.O}, random_vec(static_cast<size_t>(k.O), rng), DType::bf16);
  Tensor y = poisoned(ys, DType::bf16);
  const host::MemoryStats before = host::memory_stats();
  host::reset_peak_memory();
  ASSERT_TRUE(backend::cpu::native_bf16_conv2d(cpu(), x, w, b, y, k.args()));
  const host::MemoryStats after = host::memory_stats();
  EXPECT_GT(after.peak_allocated_bytes, before.allocated_bytes);  // the blocked copies
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);       // all freed
  host::set_memory_limit(before.allocated_bytes + 64);
  EXPECT_THROW(backend::cpu::native_bf16_conv2d(cpu(), x, w, b, y, k.args()), OutOfMemoryError);
  host::set_memory_limit(0);
  EXPECT_EQ(host::memory_stats().num_ooms, after.num_ooms + 1);
  EXPECT_EQ(host::memory_stats().allocated_bytes, before.allocated_bytes);
}

TEST(NnKernels, Conv2dCalledFromInsideAParallelRegion) {
  // Nested calls run on a team of one; per-thread scratch and partial sums must still be right.
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ConvCase k{3, 8, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, true};
  const Shape xs{k.N, k.C, k.H, k.W}, ws{k.O, k.C, 3, 3}, ys{k.N, k.O, k.OH(), k.OW()};
  std::vector<Vec> x(2), w(2), gy(2), got_y(2), got_gw(2), got_gb(2);
  std::mt19937_64 rng(seed);
  for (int t = 0; t < 2; ++t) {
    x[t] = random_vec(static_cast<size_t>(shape_numel(xs)), rng);
    w[t] = random_vec(static_cast<size_t>(shape_numel(ws)), rng);
    gy[t] = random_vec(static_cast<size_t>(shape_numel(ys)), rng);
  }
  const Vec b(static_cast<size_t>(k.O), 0.25);
  // A plain two-thread call first leaves this thread's per-thread partial sums non-zero.
  const int keep = get_num_threads();
  set_num_threads(2);
  {
    Tensor gw = poisoned(ws), gb = poisoned({k.O});
    cpu().conv2d_backward_weight(make(ys, gy[1]), make(xs, x[1]), gw, gb, k.args());
  }
#pragma omp parallel num_threads(2)
  {
#pragma omp for
    for (int t = 0; t < 2; ++t) {
      Tensor y = poisoned(ys), gw = poisoned(ws), gb = poisoned({k.O});
      cpu().conv2d(make(xs, x[t]), make(ws, w[t]), make({k.O}, b), y, k.args());
      cpu().conv2d_backward_weight(make(ys, gy[t]), make(xs, x[t]), gw, gb, k.args());
      got_y[t] = values(y);
      got_gw[t] = values(gw);
      got_gb[t] = values(gb);
    }
  }
  set_num_threads(keep);
  for (int t = 0; t < 2; ++t) {
    const ConvRef r = ref_conv(k, x[t], w[t], b, gy[t]);
    EXPECT_TRUE(close(got_y[t], r.y, 1e-12, 1e-12));
    EXPECT_TRUE(close(got_gw[t], r.gw, 1e-12, 1e-12));
    EXPECT_TRUE(close(got_gb[t], r.gb, 1e-12, 1e-12));
  }
}

// --------------------------------------------------------------------------------- pooling
struct PoolCase {
  int64_t N, C, H, W, KH, KW, sh, sw, ph, pw, dh, dw;
  bool ceil;
  // PyTorch's output size, including "the last window starts inside the input or left padding".
  static int64_t out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
    const int64_t span = in + 2 * p - d * (k - 1) - 1;
    int64_t o = (ceil ? (span + s - 1) / s : span / s) + 1;
    if (ceil && (o - 1) * s >= in + p) --o;
    return o;
  }
  int64_t OH() const { return out(H, KH, sh, ph, dh, ceil); }
  int64_t OW() const { return out(W, KW, sw, pw, dw, ceil); }
  backend::Pool2dArgs args() const {
    backend::Pool2dArgs a;
    a.kernel_h = KH, a.kernel_w = KW, a.stride_h = sh, a.stride_w = sw, a.pad_h = ph, a.pad_w = pw;
    a.dilation_h = dh, a.dilation_w = dw, a.ceil_mode = ceil;
    return a;
  }
};

// Naive max pool: scans every kernel tap; ties keep the first, NaN wins (PyTorch's rule).
void ref_max_pool(const PoolCase& k, const Vec& x, Vec& y, std::vector<int64_t>& idx) {
  const int64_t OH = k.OH(), OW = k.OW();
  y.assign(static_cast<size_t>(k.N * k.C * OH * OW), 0);
  idx.assign(y.size(), -1);
  for (int64_t p = 0; p < k.N * k.C; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -INFINITY;
        int64_t bi = -1;
        for (int64_t kh = 0; kh < k.KH; ++kh)
          for (int64_t kw = 0; kw < k.KW; ++kw) {
            const int64_t h = oh * k.sh - k.ph + kh * k.dh, w = ow * k.sw - k.pw + kw * k.dw;
            if (h < 0 || h >= k.H || w < 0 || w >= k.W) continue;
            const double v = x[static_cast<size_t>((p * k.H + h) * k.W + w)];
            if (bi < 0) bi = h * k.W + w;
            if (v > best || std::isnan(v)) best = v, bi = h * k.W + w;
          }
        y[static_cast<size_t>((p * OH + oh) * OW + ow)] = best;
        idx[static_cast<size_t>((p * OH + oh) * OW + ow)] = bi;
      }
}

const PoolCase kPoolCases[] = {
    {2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1, false},   // the common 2x2 case
    {1, 2, 7, 9, 2, 2, 2, 2, 0, 0, 1, 1, false},   // odd sizes drop the last row/col
    {1, 2, 7, 9, 2, 2, 2, 2, 0, 0, 1, 1, true},    // ceil mode keeps partial windows
    {2, 2, 9, 10, 3, 3, 2, 2, 1, 1, 1, 1, true},   // padding + ceil
    {1, 3, 6, 6, 3, 3, 2, 2, 1, 1, 1, 1, true},    // ceil window that would start in padding
    {1, 2, 11, 9, 3, 2, 3, 2, 1, 0, 2, 2, false},  // dilation
    {2, 1, 5, 12, 1, 4, 1, 3, 0, 2, 1, 1, true},   // 1-high windows
};

TEST(NnKernels, MaxPool2dForwardIndicesAndBackward) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const PoolCase& k : kPoolCases) {
    for (DType dt : {DType::f64, DType::f32}) {
      SCOPED_TRACE("case H " + std::to_string(k.H) + " W " + std::to_string(k.W) + " k " +
                   std::to_string(k.KH) + "x" + std::to_string(k.KW) + (k.ceil ? " ceil " : " ") +
                   dtype_name(dt));
      const int64_t OH = k.OH(), OW = k.OW();
      const Vec x = rounded(random_vec(static_cast<size_t>(k.N * k.C * k.H * k.W), rng), dt);
      Vec yref;
      std::vector<int64_t> iref;
      ref_max_pool(k, x, yref, iref);
      Tensor y = poisoned({k.N, k.C, OH, OW}, dt);
      Tensor idx = empty({k.N, k.C, OH, OW}, {DType::i64, Device::cpu()});
      std::fill(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel(), -7);
      cpu().max_pool2d(make({k.N, k.C, k.H, k.W}, x, dt), y, idx, k.args());
      EXPECT_TRUE(close(values(y), yref, 0, 0));
      EXPECT_TRUE(std::equal(iref.begin(), iref.end(), idx.data_ptr<int64_t>()));
      // Backward: scatter-add of gy through the reference argmax (overlapping windows add up).
      const Vec gy = rounded(random_vec(yref.size(), rng), dt);
      Vec gref(x.size(), 0.0);
      for (size_t i = 0; i < gy.size(); ++i)
        gref[static_cast<size_t>(static_cast<int64_t>(i) / (OH * OW) * k.H * k.W + iref[i])] +=
            gy[i];
      Tensor gx = poisoned({k.N, k.C, k.H, k.W}, dt);
      cpu().max_pool2d_backward(make({k.N, k.C, OH, OW}, gy, dt), idx, gx);
      EXPECT_TRUE(close(values(gx), gref, 1e-6, 1e-7));
    }
  }
}

TEST(NnKernels, MaxPool2dNaNMinusInfinityAndTies) {
  // NaN wins its window; an all -inf window reports -inf at its first element.
  const double inf = INFINITY;
  Tensor x = make({1, 1, 2, 4}, {1.0, kNaN, -inf, -inf, 3.0, 2.0, -inf, -inf});
  Tensor y = poisoned({1, 1, 1, 2});
  Tensor idx = empty({1, 1, 1, 2}, {DType::i64, Device::cpu()});
  backend::Pool2dArgs a;
  a.kernel_h = a.kernel_w = a.stride_h = a.stride_w = 2;
  cpu().max_pool2d(x, y, idx, a);
  EXPECT_TRUE(std::isnan(values(y)[0]));
  EXPECT_EQ(idx.data_ptr<int64_t>()[0], 1);
  EXPECT_EQ(values(y)[1], -inf);
  EXPECT_EQ(idx.data_ptr<int64_t>()[1], 2);

  // Ties keep the first maximum in scan order, in the 2x2 fast path and the general path.
  Tensor t = make({1, 1, 3, 4}, {1.0, 2.0, 4.0, 4.0, 2.0, 2.0, 4.0, 4.0, 0.0, 4.0, 0.0, 0.0});
  Tensor y2 = poisoned({1, 1, 1, 2});
  cpu().max_pool2d(t, y2, idx, a);
  EXPECT_EQ(idx.data_ptr<int64_t>()[0], 1);
  EXPECT_EQ(idx.data_ptr<int64_t>()[1], 2);
  backend::Pool2dArgs b;
  b.kernel_h = b.kernel_w = 3;
  b.stride_h = b.stride_w = 1;
  Tensor y3 = poisoned({1, 1, 1, 2});
  cpu().max_pool2d(t, y3, idx, b);
  EXPECT_EQ(idx.data_ptr<int64_t>()[0], 2);
  EXPECT_EQ(idx.data_ptr<int64_t>()[1], 2);
  EXPECT_TRUE(close(values(y3), {4.0, 4.0}, 0, 0));
}

Vec ref_avg_pool(const PoolCase& k, bool include_pad, int64_t divisor, const Vec& x) {
  const int64_t OH = k.OH(), OW = k.OW();
  Vec y(static_cast<size_t>(k.N * k.C * OH * OW));
  for (int64_t p = 0; p < k.N * k.C; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double s = 0;
        int64_t valid = 0, in_padded = 0;
        for (int64_t kh = 0; kh < k.KH; ++kh)
          for (int64_t kw = 0; kw < k.KW; ++kw) {
            const int64_t h = oh * k.sh - k.ph + kh, w = ow * k.sw - k.pw + kw;
            if (h < k.H + k.ph && w < k.W + k.pw) ++in_padded;  // taps inside the padded input
            if (h < 0 || h >= k.H || w < 0 || w >= k.W) continue;
            s += x[static_cast<size_t>((p * k.H + h) * k.W + w)];
            ++valid;
          }
        const int64_t div = divisor ? divisor : include_pad ? in_padded : valid;
        y[static_cast<size_t>((p * OH + oh) * OW + ow)] =
            valid ? s / static_cast<double>(div) : 0.0;
      }
  return y;
}

TEST(NnKernels, AvgPool2dPaddingDivisorCeilModeAndBackward) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (PoolCase k : kPoolCases) {
    k.dh = k.dw = 1;  // avg pool has no dilation
    for (auto [include_pad, divisor] : {std::pair<bool, int64_t>{true, 0}, {false, 0}, {true, 5}}) {
      SCOPED_TRACE("H " + std::to_string(k.H) + " W " + std::to_string(k.W) + " k " +
                   std::to_string(k.KH) + "x" + std::to_string(k.KW) + (k.ceil ? " ceil" : "") +
                   (include_pad ? " include_pad" : "") + " divisor " + std::to_string(divisor));
      const int64_t OH = k.OH(), OW = k.OW();
      const Vec x = random_vec(static_cast<size_t>(k.N * k.C * k.H * k.W), rng);
      backend::Pool2dArgs a = k.args();
      a.count_include_pad = include_pad;
      a.divisor_override = divisor;
      Tensor y = poisoned({k.N, k.C, OH, OW});
      cpu().avg_pool2d(make({k.N, k.C, k.H, k.W}, x), y, a);
      EXPECT_TRUE(close(values(y), ref_avg_pool(k, include_pad, divisor, x), 1e-12, 1e-14));
      const Vec gy = random_vec(static_cast<size_t>(y.numel()), rng);
      Tensor gx = poisoned({k.N, k.C, k.H, k.W});
      cpu().avg_pool2d_backward(make({k.N, k.C, OH, OW}, gy), gx, a);
      const Vec num = numeric_grad(
          [&](const Vec& v) { return ref_avg_pool(k, include_pad, divisor, v); }, x, gy);
      EXPECT_TRUE(close(values(gx), num, 1e-7, 1e-9));
    }
  }
}

Vec ref_adaptive(const Vec& x, int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW) {
  Vec y(static_cast<size_t>(planes * OH * OW));
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < OH; ++i)
      for (int64_t j = 0; j < OW; ++j) {
        const auto lo = [](int64_t a, int64_t o, int64_t n) {
          return static_cast<int64_t>(std::floor(double(a) * n / o));
        };
        const auto hi = [](int64_t a, int64_t o, int64_t n) {
          return static_cast<int64_t>(std::ceil(double(a + 1) * n / o));
        };
        double s = 0;
        for (int64_t h = lo(i, OH, H); h < hi(i, OH, H); ++h)
          for (int64_t w = lo(j, OW, W); w < hi(j, OW, W); ++w)
            s += x[static_cast<size_t>((p * H + h) * W + w)];
        y[static_cast<size_t>((p * OH + i) * OW + j)] =
            s / static_cast<double>((hi(i, OH, H) - lo(i, OH, H)) * (hi(j, OW, W) - lo(j, OW, W)));
      }
  return y;
}

TEST(NnKernels, AdaptiveAvgPool2dAndBackward) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (auto [H, W, OH, OW] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{7, 7, 1, 1},
                              {10, 7, 3, 4},
                              {5, 5, 7, 6},
                              {6, 9, 6, 9},
                              {13, 11, 5, 2}}) {
    SCOPED_TRACE(std::to_string(H) + "x" + std::to_string(W) + " -> " + std::to_string(OH) + "x" +
                 std::to_string(OW));
    const int64_t N = 2, C = 3;
    const Vec x = random_vec(static_cast<size_t>(N * C * H * W), rng);
    Tensor y = poisoned({N, C, OH, OW});
    cpu().adaptive_avg_pool2d(make({N, C, H, W}, x), y);
    EXPECT_TRUE(close(values(y), ref_adaptive(x, N * C, H, W, OH, OW), 1e-12, 1e-14));
    const Vec gy = random_vec(static_cast<size_t>(y.numel()), rng);
    Tensor gx = poisoned({N, C, H, W});
    cpu().adaptive_avg_pool2d_backward(make({N, C, OH, OW}, gy), gx);
    const Vec num =
        numeric_grad([&](const Vec& v) { return ref_adaptive(v, N * C, H, W, OH, OW); }, x, gy);
    EXPECT_TRUE(close(values(gx), num, 1e-7, 1e-9));
  }
}

}  // namespace
}  // namespace gradus
