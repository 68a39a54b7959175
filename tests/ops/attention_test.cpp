// The fused attention kernel against the composite it replaces (matmul, causal mask, softmax,
// dropout, matmul) computed in float64 on the CPU from the same values, forward and backward, on
// every device and floating dtype; plus masked_fill / tril / triu, topk and multinomial.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "gradus/core/host_memory.h"
#include "gradus/core/threads.h"
#include "support/test_util.h"

namespace gradus {
namespace {

using testing::all_close;
using testing::fresh_seed;
using testing::random_tensor;

struct Case {
  Shape q, k, v;  // [..., T, D]
  bool causal;
  double dropout;
};

// softmax(q k^T scale + mask) (dropout) v from ops that exist independently of the kernel.
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double p,
                 Generator* gen) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor s = mul(matmul(q, k.transpose(-2, -1)), scale);
  if (causal) {
    const Tensor future = gt(triu(ones({q.size(-2), k.size(-2)}, {.device = q.device()}), 1), 0.5);
    s = masked_fill(s, future, -INFINITY);
  }
  Tensor a = softmax(s, -1);
  if (p > 0) a = dropout(a, p, true, gen);
  return matmul(a, v);
}

struct Grads {
  Tensor out, gq, gk, gv;
};

// Output and input gradients of sum(out * w) for leaves q, k, v in `dtype` on `device`.
template <typename Fn>
Grads run(const Fn& fn, const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& w,
          DType dtype, Device device) {
  Tensor q = q0.to(device, dtype).detach().set_requires_grad();
  Tensor k = k0.to(device, dtype).detach().set_requires_grad();
  Tensor v = v0.to(device, dtype).detach().set_requires_grad();
  Tensor out = fn(q, k, v);
  sum(mul(out, w.to(device, out.dtype()))).backward();
  return {out, q.grad(), k.grad(), v.grad()};
}

double forward_tol(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-10;
    case DType::f32:
      return 2e-5;
    case DType::f16:
      return 4e-3;
    default:
      return 3e-2;
  }
}

AttentionOptions opts(bool causal, double dropout = 0.0, Generator* gen = nullptr) {
  AttentionOptions o;
  o.causal = causal;
  o.dropout_p = dropout;
  o.generator = gen;
  return o;
}

bool has(Device d) {
  return d.is_cpu() || cuda_device_count() > d.index();
}

class FusedAttention : public ::testing::TestWithParam<std::tuple<Device, DType>> {};

TEST_P(FusedAttention, MatchesTheCompositeForwardAndBackward) {
  const auto [device, dtype] = GetParam();
  if (!has(device)) GTEST_SKIP() << "no CUDA device";
  const std::vector<Case> cases = {
      {{1, 1, 1, 4}, {1, 1, 1, 4}, {1, 1, 1, 4}, false, 0.0},           // one token
      {{2, 3, 5, 8}, {2, 3, 5, 8}, {2, 3, 5, 8}, true, 0.0},            // odd length
      {{2, 2, 67, 16}, {2, 2, 67, 16}, {2, 2, 67, 16}, true, 0.0},      // spans two tiles
      {{1, 2, 130, 32}, {1, 2, 130, 32}, {1, 2, 130, 32}, false, 0.0},  // three tiles
      {{3, 70, 12}, {3, 45, 12}, {3, 45, 20}, false, 0.0},              // Tq != Tk, D != Dv
      {{3, 70, 12}, {3, 45, 12}, {3, 45, 20}, true, 0.0},               // causal, Tq > Tk
      {{2, 2, 67, 16}, {2, 2, 67, 16}, {2, 2, 67, 16}, true, 0.3},      // dropout
      {{5, 9}, {7, 9}, {7, 3}, false, 0.5},                             // no batch dims
      {{1, 2, 70, 80}, {1, 2, 70, 80}, {1, 2, 70, 72}, true, 0.0},      // heads over 64 wide
  };
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (size_t n = 0; n < cases.size(); ++n) {
    const Case& c = cases[n];
    SCOPED_TRACE("case " + std::to_string(n));
    // Values rounded through the test dtype, so that the reference sees the same inputs.
    const Tensor q = random_tensor(c.q, seed + 3 * n, -2, 2).to(dtype).to(DType::f64);
    const Tensor k = random_tensor(c.k, seed + 3 * n + 1, -2, 2).to(dtype).to(DType::f64);
    const Tensor v = random_tensor(c.v, seed + 3 * n + 2).to(dtype).to(DType::f64);
    Shape os = c.q;
    os.back() = c.v.back();
    const Tensor w = random_tensor(os, seed + 1000 + n);
    const uint64_t drop_seed = seed ^ 0x9e37;
    const Grads ref = run(
        [&](const Tensor& a, const Tensor& b, const Tensor& d) {
          Generator g(drop_seed);
          return composite(a, b, d, c.causal, c.dropout, &g);
        },
        q, k, v, w, DType::f64, Device::cpu());
    const Grads got = run(
        [&](const Tensor& a, const Tensor& b, const Tensor& d) {
          Generator g(drop_seed);
          return scaled_dot_product_attention(a, b, d, opts(c.causal, c.dropout, &g));
        },
        q, k, v, w, dtype, device);
    ASSERT_EQ(got.out.dtype(), dtype);
    const double tol = forward_tol(dtype);
    EXPECT_TRUE(all_close(got.out.cpu(), ref.out, tol, tol)) << "output";
    // Gradients add O(T) rounded terms: a looser bound for the 16-bit types.
    const double gtol = dtype == DType::f64 ? 1e-9 : 4 * tol;
    EXPECT_TRUE(all_close(got.gq.cpu(), ref.gq, gtol, gtol)) << "grad q";
    EXPECT_TRUE(all_close(got.gk.cpu(), ref.gk, gtol, gtol)) << "grad k";
    EXPECT_TRUE(all_close(got.gv.cpu(), ref.gv, gtol, gtol)) << "grad v";
  }
}

TEST_P(FusedAttention, BackwardIsBitwiseDeterministic) {
  const auto [device, dtype] = GetParam();
  if (!has(device)) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = fresh_seed();
  const Tensor q = random_tensor({2, 2, 150, 16}, seed),
               k = random_tensor({2, 2, 150, 16}, seed + 1),
               v = random_tensor({2, 2, 150, 16}, seed + 2),
               w = random_tensor({2, 2, 150, 16}, seed + 3);
  auto fn = [](const Tensor& a, const Tensor& b, const Tensor& d) {
    return scaled_dot_product_attention(a, b, d, opts(true));
  };
  const Grads a = run(fn, q, k, v, w, dtype, device), b = run(fn, q, k, v, w, dtype, device);
  EXPECT_TRUE(all_close(a.gq.cpu(), b.gq.cpu(), 0, 0));
  EXPECT_TRUE(all_close(a.gk.cpu(), b.gk.cpu(), 0, 0));
  EXPECT_TRUE(all_close(a.gv.cpu(), b.gv.cpu(), 0, 0));
}

// Grouped-query attention (enable_gqa): k and v with 1, 2 or 3 heads serving q's 6, against the
// float64 composite on k and v repeated per query head, and against the kernel given the
// repeated copies: the same output (the same tiles multiply the same values), and key/value
// gradients that are the repeated copies' gradients summed over each group. With dropout the
// masks are the same draws either way.
TEST_P(FusedAttention, GroupedQueryHeadsMatchRepeatedKeysAndValues) {
  const auto [device, dtype] = GetParam();
  if (!has(device)) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const int64_t b = 2, h = 6, t = 70, hs = 16;
  const auto repeat = [&](const Tensor& x) {
    const int64_t kv = x.size(1);
    return x.unsqueeze(2).expand({b, kv, h / kv, t, hs}).reshape({b, h, t, hs});
  };
  for (const int64_t kv : {int64_t{1}, int64_t{2}, int64_t{3}}) {
    for (const double p : {0.0, 0.2}) {
      SCOPED_TRACE(::testing::Message() << "kv heads " << kv << " dropout " << p);
      const Tensor q = random_tensor({b, h, t, hs}, seed, -2, 2).to(dtype).to(DType::f64);
      const Tensor k = random_tensor({b, kv, t, hs}, seed + kv, -2, 2).to(dtype).to(DType::f64);
      const Tensor v = random_tensor({b, kv, t, hs}, seed + 7 * kv).to(dtype).to(DType::f64);
      const Tensor w = random_tensor({b, h, t, hs}, seed + 11);
      const uint64_t drop_seed = seed ^ 0x51ed;
      auto fused = [&](bool gqa) {
        return [&, gqa](const Tensor& a, const Tensor& kk, const Tensor& vv) {
          Generator g(drop_seed);
          AttentionOptions o = opts(true, p, &g);
          o.enable_gqa = gqa;
          return gqa ? scaled_dot_product_attention(a, kk, vv, o)
                     : scaled_dot_product_attention(a, repeat(kk), repeat(vv), o);
        };
      };
      const Grads grouped = run(fused(true), q, k, v, w, dtype, device);
      const Grads repeated = run(fused(false), q, k, v, w, dtype, device);
      ASSERT_EQ(grouped.gk.sizes(), k.sizes());
      EXPECT_TRUE(all_close(grouped.out.cpu(), repeated.out.cpu(), 0, 0)) << "output";
      EXPECT_TRUE(all_close(grouped.gq.cpu(), repeated.gq.cpu(), 0, 0)) << "grad q";
      const double tol = 4 * forward_tol(dtype);
      EXPECT_TRUE(all_close(grouped.gk.cpu(), repeated.gk.cpu(), tol, tol)) << "grad k";
      EXPECT_TRUE(all_close(grouped.gv.cpu(), repeated.gv.cpu(), tol, tol)) << "grad v";
      const Grads ref = run(
          [&](const Tensor& a, const Tensor& kk, const Tensor& vv) {
            Generator g(drop_seed);
            return composite(a, repeat(kk), repeat(vv), true, p, &g);
          },
          q, k, v, w, DType::f64, Device::cpu());
      EXPECT_TRUE(all_close(grouped.out.cpu(), ref.out, forward_tol(dtype), forward_tol(dtype)));
      const double gtol = dtype == DType::f64 ? 1e-9 : tol;
      EXPECT_TRUE(all_close(grouped.gk.cpu(), ref.gk, gtol, gtol)) << "grad k vs float64";
      EXPECT_TRUE(all_close(grouped.gv.cpu(), ref.gv, gtol, gtol)) << "grad v vs float64";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, FusedAttention,
                         ::testing::Combine(::testing::Values(Device::cpu(), Device::cuda(0)),
                                            ::testing::Values(DType::f32, DType::f64, DType::f16,
                                                              DType::bf16)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).is_cpu() ? "cpu" : "cuda") +
                                  "_" + dtype_name(std::get<1>(info.param));
                         });

// The CPU backward runs one pass per (batch x head) entry when there are at least 4 entries per
// thread and two passes (key tiles, then query tiles) otherwise; both must give bitwise the same
// gradients, so results do not depend on the thread count. 8 entries take one pass on 1 thread
// and two passes on 3; T = 150 (five 32-row query tiles and three 64-key tiles, the last ones
// partial), causal and not, Tq != Tk.
TEST(FusedAttentionPaths, OnePassAndTwoPassBackwardsAgreeBitwise) {
  const int saved = get_num_threads();
  const uint64_t seed = fresh_seed();
  for (const bool causal : {false, true}) {
    for (const int64_t tk : {int64_t{150}, int64_t{97}}) {
      const Tensor q = random_tensor({8, 150, 24}, seed, -2, 2, DType::f32),
                   k = random_tensor({8, tk, 24}, seed + 1, -2, 2, DType::f32),
                   v = random_tensor({8, tk, 20}, seed + 2, -1, 1, DType::f32),
                   w = random_tensor({8, 150, 20}, seed + 3, -1, 1, DType::f32);
      auto fn = [&](const Tensor& a, const Tensor& b, const Tensor& d) {
        return scaled_dot_product_attention(a, b, d, opts(causal));
      };
      set_num_threads(1);
      const Grads one = run(fn, q, k, v, w, DType::f32, Device::cpu());
      set_num_threads(3);
      const Grads two = run(fn, q, k, v, w, DType::f32, Device::cpu());
      SCOPED_TRACE(::testing::Message() << "causal " << causal << " tk " << tk);
      EXPECT_TRUE(all_close(one.out, two.out, 0, 0));
      EXPECT_TRUE(all_close(one.gq, two.gq, 0, 0));
      EXPECT_TRUE(all_close(one.gk, two.gk, 0, 0));
      EXPECT_TRUE(all_close(one.gv, two.gv, 0, 0));
    }
  }
  // Grouped-query heads: 4 key/value entries (2 x 2 heads, each serving 3 query heads) take one
  // pass on 1 thread and two on 3, each summing a key/value head's gradient over its query heads.
  const Tensor q = random_tensor({2, 6, 150, 24}, seed + 4, -2, 2, DType::f32),
               k = random_tensor({2, 2, 97, 24}, seed + 5, -2, 2, DType::f32),
               v = random_tensor({2, 2, 97, 20}, seed + 6, -1, 1, DType::f32),
               w = random_tensor({2, 6, 150, 20}, seed + 7, -1, 1, DType::f32);
  auto gqa = [&](const Tensor& a, const Tensor& b, const Tensor& d) {
    AttentionOptions o = opts(true);
    o.enable_gqa = true;
    return scaled_dot_product_attention(a, b, d, o);
  };
  set_num_threads(1);
  const Grads one = run(gqa, q, k, v, w, DType::f32, Device::cpu());
  set_num_threads(3);
  const Grads two = run(gqa, q, k, v, w, DType::f32, Device::cpu());
  EXPECT_TRUE(all_close(one.gq, two.gq, 0, 0));
  EXPECT_TRUE(all_close(one.gk, two.gk, 0, 0));
  EXPECT_TRUE(all_close(one.gv, two.gv, 0, 0));
  set_num_threads(saved);
}

// Heads taken as views of one [B, T, 3C] projection (no copies: the kernel reads the strided rows)
// give bitwise what contiguous [B, H, T, D] copies give, and their output and gradients come
// back laid out [B, T, H, D], so that merging the heads is a view.
TEST(FusedAttentionPaths, HeadViewsOfAProjectionMatchContiguousHeadsBitwise) {
  const int64_t b = 3, t = 70, h = 4, hs = 12, c = h * hs;
  const uint64_t seed = fresh_seed();
  const Tensor qkv = random_tensor({b, t, 3 * c}, seed, -2, 2, DType::f32);
  const Tensor w = random_tensor({b, h, t, hs}, seed + 1, -1, 1, DType::f32);
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "causal " << causal);
    auto heads = [&](const Tensor& x, int64_t i, bool copy) {
      Tensor v = x.narrow(2, i * c, c).reshape({b, t, h, hs}).transpose(1, 2);
      return copy ? v.contiguous() : v;
    };
    Tensor grads[2][3];
    Tensor outs[2];
    for (const bool copy : {false, true}) {
      const Tensor x = qkv.detach().set_requires_grad();
      const Tensor y = scaled_dot_product_attention(heads(x, 0, copy), heads(x, 1, copy),
                                                    heads(x, 2, copy), opts(causal));
      if (!copy) {
        // [B, H, T, hs] over [B, T, H, hs] memory: transposing back is contiguous.
        EXPECT_TRUE(y.transpose(1, 2).is_contiguous());
      }
      sum(mul(y, w)).backward();
      outs[copy] = y.contiguous();
      for (int64_t i = 0; i < 3; ++i) grads[copy][i] = x.grad().narrow(2, i * c, c).contiguous();
    }
    EXPECT_TRUE(all_close(outs[0], outs[1], 0, 0));
    for (int64_t i = 0; i < 3; ++i) EXPECT_TRUE(all_close(grads[0][i], grads[1][i], 0, 0)) << i;
  }
}

// q, k, v split from one [B, T, 3C] projection get their gradients in one buffer laid out like
// the projection, which split's backward hands on without concatenating; the gradient is bitwise
// the one separate copies of the heads get. Pieces whose gradients are not laid side by side
// (those copies, or pieces with unrelated gradients) still go through cat.
TEST(FusedAttentionPaths, SplitProjectionGetsItsGradientWithoutACopy) {
  const int64_t b = 2, t = 37, h = 3, hs = 8, c = h * hs;
  const uint64_t seed = fresh_seed();
  const Tensor qkv = random_tensor({b, t, 3 * c}, seed, -2, 2, DType::f32);
  const Tensor w = random_tensor({b, h, t, hs}, seed + 1, -1, 1, DType::f32);
  auto heads = [&](const Tensor& y, bool copy) {
    Tensor v = y.reshape({b, t, h, hs}).transpose(1, 2);
    return copy ? v.contiguous() : v;
  };
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "causal " << causal);
    Tensor grads[2];
    for (const bool copy : {false, true}) {
      const Tensor x = qkv.detach().set_requires_grad();
      const std::vector<Tensor> parts = split(x, c, 2);
      const Tensor y = scaled_dot_product_attention(heads(parts[0], copy), heads(parts[1], copy),
                                                    heads(parts[2], copy), opts(causal));
      KernelCountScope kernels;
      sum(mul(y, w)).backward();
      EXPECT_EQ(kernels["split.joined_grad"], copy ? 0 : 1);
      EXPECT_EQ(kernels["split.cat_grad"], copy ? 1 : 0);
      grads[copy] = x.grad();
    }
    EXPECT_TRUE(grads[0].is_contiguous());
    EXPECT_TRUE(all_close(grads[0], grads[1], 0, 0));
  }
  // Pieces of different storages or strides are concatenated: a split whose pieces get
  // unrelated gradients.
  const Tensor x = qkv.detach().set_requires_grad();
  const std::vector<Tensor> parts = split(x, c, 2);
  KernelCountScope kernels;
  sum(add(mul(parts[0], 2.0), mul(parts[2], 3.0))).backward();
  EXPECT_EQ(kernels["split.cat_grad"], 1);
  EXPECT_EQ(kernels["split.joined_grad"], 0);
  const Tensor expected = cat({full({b, t, c}, 2.0), zeros({b, t, c}), full({b, t, c}, 3.0)}, 2);
  EXPECT_TRUE(all_close(x.grad(), expected, 0, 0));
}

// The kernel never holds the [T, T] scores: tensor memory grows with T, not T^2.
TEST(FusedAttentionMemory, PeakDoesNotGrowWithTheScoreMatrix) {
  const int64_t bh = 4, t = 1024, d = 32;
  const uint64_t seed = fresh_seed();
  Tensor q = random_tensor({bh, t, d}, seed, -1, 1, DType::f32).set_requires_grad();
  Tensor k = random_tensor({bh, t, d}, seed + 1, -1, 1, DType::f32).set_requires_grad();
  Tensor v = random_tensor({bh, t, d}, seed + 2, -1, 1, DType::f32).set_requires_grad();
  auto peak_of = [&](auto fn) {
    const size_t before = host::memory_stats().allocated_bytes;
    host::reset_peak_memory();
    sum(fn()).backward();
    return host::memory_stats().peak_allocated_bytes - before;
  };
  const size_t fused = peak_of([&] { return scaled_dot_product_attention(q, k, v, opts(true)); });
  const size_t comp = peak_of([&] { return composite(q, k, v, true, 0.0, nullptr); });
  const size_t scores = static_cast<size_t>(bh * t * t) * sizeof(float);
  EXPECT_LT(fused, scores / 4) << "fused peak " << fused;
  EXPECT_GT(comp, scores) << "the composite must materialise the scores (sanity of the probe)";
}

// No keys (Tk = 0): every output row is an empty weighted sum, 0, and so is dQ.
TEST(FusedAttentionEdges, NoKeysGivesZeros) {
  Tensor q = random_tensor({2, 3, 4}, fresh_seed()).set_requires_grad();
  Tensor k = zeros({2, 0, 4}, {.dtype = DType::f64}).set_requires_grad();
  Tensor v = zeros({2, 0, 5}, {.dtype = DType::f64}).set_requires_grad();
  const Tensor out = scaled_dot_product_attention(q, k, v);
  ASSERT_EQ(out.sizes(), (Shape{2, 3, 5}));
  EXPECT_EQ(max(abs(out)).item(), 0.0);
  sum(mul(out, random_tensor({2, 3, 5}, fresh_seed()))).backward();
  EXPECT_EQ(max(abs(q.grad())).item(), 0.0);
  EXPECT_EQ(k.grad().sizes(), (Shape{2, 0, 4}));
}

TEST(FusedAttentionErrors, NameWhatIsWrong) {
  const Tensor q = randn({2, 4, 8}), k = randn({2, 5, 8}), v = randn({2, 5, 6});
  EXPECT_THROW(scaled_dot_product_attention(q, randn({2, 5, 7}), v), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, randn({2, 4, 6})), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, randn({3, 5, 8}), randn({3, 5, 6})), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, k.to(DType::f64), v), DTypeError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, opts(false, 1.0)), ValueError);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, opts(false, NAN)), ValueError);
  EXPECT_THROW(scaled_dot_product_attention(randn({4}), randn({4}), randn({4})), ShapeError);
  // Grouped-query heads: only with enable_gqa, only 4-D, and only heads that divide q's.
  AttentionOptions gqa;
  gqa.enable_gqa = true;
  const Tensor q4 = randn({2, 6, 5, 8}), k2 = randn({2, 2, 5, 8}), v2 = randn({2, 2, 5, 8});
  const auto message = [](const auto& fn) {
    try {
      fn();
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { scaled_dot_product_attention(q4, k2, v2); }).find("enable_gqa"),
            std::string::npos);
  EXPECT_NE(message([&] { scaled_dot_product_attention(q, k, v, gqa); }).find("4-D"),
            std::string::npos);
  EXPECT_NE(message([&] {
              scaled_dot_product_attention(q4, randn({2, 4, 5, 8}), randn({2, 4, 5, 8}), gqa);
            }).find("dividing"),
            std::string::npos);
  EXPECT_THROW(scaled_dot_product_attention(q4, k2, randn({2, 3, 5, 8}), gqa), ShapeError);
  EXPECT_EQ(scaled_dot_product_attention(q4, k2, v2, gqa).sizes(), q4.sizes());
}

TEST(Masking, TrilTriuAndMaskedFillMatchIndexArithmetic) {
  const Tensor x = random_tensor({2, 4, 6}, fresh_seed());
  const std::vector<double> xv = x.to_vector<double>();
  for (int64_t diag : {-2, 0, 1, 3}) {
    const std::vector<double> lo = tril(x, diag).to_vector<double>();
    const std::vector<double> up = triu(x, diag).to_vector<double>();
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t i = 0; i < 4; ++i) {
        for (int64_t j = 0; j < 6; ++j) {
          const size_t e = static_cast<size_t>((b * 4 + i) * 6 + j);
          EXPECT_EQ(lo[e], j - i <= diag ? xv[e] : 0.0);
          EXPECT_EQ(up[e], j - i >= diag ? xv[e] : 0.0);
        }
      }
    }
  }
  Tensor leaf = x.detach().set_requires_grad();
  const Tensor mask = gt(random_tensor({4, 6}, fresh_seed()), 0.0);
  Tensor y = masked_fill(leaf, mask, -5.0);
  sum(y).backward();
  const std::vector<double> yv = y.to_vector<double>(), gv = leaf.grad().to_vector<double>();
  const std::vector<double> mv = mask.to(DType::f64).to_vector<double>();
  for (size_t e = 0; e < yv.size(); ++e) {
    const bool m = mv[e % 24] != 0;
    EXPECT_EQ(yv[e], m ? -5.0 : xv[e]);
    EXPECT_EQ(gv[e], m ? 0.0 : 1.0);
  }
  EXPECT_THROW(masked_fill(x, x, 1.0), DTypeError);
  EXPECT_THROW(tril(randn({3})), ShapeError);
}

TEST(Sampling, TopkMatchesASortAndCarriesTheGradient) {
  const Tensor x = random_tensor({3, 10}, fresh_seed()).set_requires_grad();
  const ValuesIndices t = topk(x, 4, 1);
  const std::vector<double> xv = x.to_vector<double>(), tv = t.values.to_vector<double>();
  const std::vector<int64_t> ti = t.indices.to_vector<int64_t>();
  for (int64_t r = 0; r < 3; ++r) {
    std::vector<double> row(xv.begin() + r * 10, xv.begin() + (r + 1) * 10);
    std::sort(row.begin(), row.end(), std::greater<>());
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_EQ(tv[r * 4 + j], row[j]);
      EXPECT_EQ(xv[r * 10 + ti[r * 4 + j]], row[j]);
    }
  }
  sum(t.values).backward();
  EXPECT_DOUBLE_EQ(sum(x.grad()).item(), 12.0);
  // Along dim 0, with ties: the lower index comes first.
  const ValuesIndices c = topk(tensor({1, 3, 3, 2}, {4, 1}), 2, 0);
  EXPECT_EQ(c.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_THROW(topk(x, 11, 1), ValueError);
  // A 0-dim input is one element: k = 1 gives it back (0-dim), k = 0 gives nothing.
  const Tensor s = scalar_tensor(2.5);
  EXPECT_EQ(topk(s, 1).values.item(), 2.5);
  EXPECT_EQ(topk(s, 1).indices.dim(), 0);
  EXPECT_EQ(topk(s, 0).values.numel(), 0);
  EXPECT_EQ(topk(s, 0).indices.numel(), 0);
}

TEST(Sampling, MultinomialFollowsTheWeights) {
  Generator g(fresh_seed());
  const Tensor p = tensor({0.0, 1.0, 3.0, 0.0, 4.0}, {1, 5});
  const std::vector<int64_t> s = multinomial(p, 40000, &g).to_vector<int64_t>();
  std::map<int64_t, int> count;
  for (int64_t c : s) ++count[c];
  EXPECT_EQ(count[0] + count[3], 0) << "a zero-weight class was drawn";
  EXPECT_NEAR(count[1] / 40000.0, 1.0 / 8, 0.01);
  EXPECT_NEAR(count[2] / 40000.0, 3.0 / 8, 0.015);
  EXPECT_NEAR(count[4] / 40000.0, 4.0 / 8, 0.015);
  // Same generator state, same draws.
  Generator a(7), b(7);
  EXPECT_EQ(multinomial(p, 50, &a).to_vector<int64_t>(),
            multinomial(p, 50, &b).to_vector<int64_t>());
  EXPECT_THROW(multinomial(tensor({0.0, 0.0}), 1), ValueError);
  EXPECT_THROW(multinomial(tensor({1.0, -1.0}), 1), ValueError);
  EXPECT_THROW(multinomial(tensor({1.0, NAN}), 1), ValueError);
}

}  // namespace
}  // namespace gradus
