// Layers: default initialisation (ranges and statistics), forwards against float64 references
// computed here, and train/eval behaviour of Dropout and BatchNorm.
#include <algorithm>
#include <cmath>

#include "support/test_util.h"

namespace gradus {
namespace {

using testing::all_close;
using testing::fresh_seed;
using testing::random_tensor;
using testing::values_of;

struct Stats {
  double mean = 0, var = 0, max_abs = 0;
};

Stats stats_of(const Tensor& t) {
  const std::vector<double> v = values_of(t);
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  for (double x : v) {
    s.var += (x - s.mean) * (x - s.mean);
    s.max_abs = std::max(s.max_abs, std::abs(x));
  }
  s.var /= static_cast<double>(v.size());
  return s;
}

// Sets a tensor's values without history.
void assign(Tensor t, const Tensor& values) {
  NoGradGuard g;
  t.copy_(values);
}

// ------------------------------------------------------------------------------ initialisation
TEST(LayerInit, LinearIsUniformWithBoundOneOverSqrtFanIn) {
  manual_seed(fresh_seed());
  nn::Linear lin(1024, 512);
  const double bound = 1.0 / std::sqrt(1024.0);
  const Stats w = stats_of(lin.weight);
  EXPECT_LE(w.max_abs, bound);
  EXPECT_GE(w.max_abs, 0.999 * bound);
  EXPECT_NEAR(w.mean, 0.0, 0.01 * bound);
  EXPECT_NEAR(w.var, bound * bound / 3.0, 0.01 * bound * bound / 3.0);
  const Stats b = stats_of(lin.bias);
  EXPECT_LE(b.max_abs, bound);
  EXPECT_GE(b.max_abs, 0.8 * bound);
  EXPECT_TRUE(lin.weight.requires_grad());
  EXPECT_TRUE(lin.bias.requires_grad());
  EXPECT_EQ(lin.weight.dtype(), DType::f32);
  EXPECT_FALSE(nn::Linear(4, 3, false).bias.defined());
  EXPECT_EQ(nn::Linear(4, 3, false).parameters().size(), 1u);
  EXPECT_THROW(nn::Linear(0, 3), ValueError);
}

TEST(LayerInit, Conv2dFanInCountsGroupsAndKernel) {
  manual_seed(fresh_seed());
  nn::Conv2d conv(6, 8, 3, {.groups = 2});
  EXPECT_EQ(conv.weight.sizes(), (Shape{8, 3, 3, 3}));
  const double bound = 1.0 / std::sqrt(3.0 * 9.0);
  const Stats w = stats_of(conv.weight), b = stats_of(conv.bias);
  EXPECT_LE(w.max_abs, bound);
  EXPECT_GE(w.max_abs, 0.8 * bound);
  EXPECT_LE(b.max_abs, bound);
  EXPECT_THROW(nn::Conv2d(5, 8, 3, {.groups = 2}), ValueError);
  EXPECT_THROW(nn::Conv2d(4, 8, 3, {.stride = 0}), ValueError);
}

TEST(LayerInit, EmbeddingIsStandardNormalAndNormsAreOnesZeros) {
  manual_seed(fresh_seed());
  nn::Embedding emb(1000, 64);
  const Stats e = stats_of(emb.weight);
  EXPECT_NEAR(e.mean, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(e.var), 1.0, 0.02);
  nn::BatchNorm2d bn(7);
  EXPECT_EQ(values_of(bn.weight), std::vector<double>(7, 1.0));
  EXPECT_EQ(values_of(bn.bias), std::vector<double>(7, 0.0));
  EXPECT_EQ(values_of(bn.running_mean), std::vector<double>(7, 0.0));
  EXPECT_EQ(values_of(bn.running_var), std::vector<double>(7, 1.0));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 0);
  EXPECT_FALSE(bn.running_mean.requires_grad());
  nn::LayerNorm ln(Shape{2, 3});
  EXPECT_EQ(values_of(ln.weight), std::vector<double>(6, 1.0));
  EXPECT_EQ(values_of(ln.bias), std::vector<double>(6, 0.0));
  nn::BatchNorm2d plain(3, 1e-5, 0.1, /*affine=*/false, /*track_running_stats=*/false);
  EXPECT_TRUE(plain.state_dict().empty());
}

TEST(InitHelpers, FansGainsAndDistributions) {
  manual_seed(fresh_seed());
  EXPECT_EQ(nn::init::calculate_fan_in_and_fan_out(empty({32, 16, 3, 5})),
            (std::pair<int64_t, int64_t>{16 * 15, 32 * 15}));
  EXPECT_EQ(nn::init::calculate_fan_in_and_fan_out(empty({7, 9})),
            (std::pair<int64_t, int64_t>{9, 7}));
  EXPECT_THROW(nn::init::calculate_fan_in_and_fan_out(empty({5})), ValueError);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", 0.2), std::sqrt(2.0 / 1.04));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("conv2d"), 1.0);
  EXPECT_THROW(nn::init::calculate_gain("swish"), ValueError);

  Tensor a = empty({300, 200});
  nn::init::xavier_uniform_(a);
  const double xb = std::sqrt(6.0 / 500.0);
  Stats s = stats_of(a);
  EXPECT_LE(s.max_abs, xb);
  EXPECT_GE(s.max_abs, 0.999 * xb);
  EXPECT_NEAR(s.var, xb * xb / 3.0, 0.03 * xb * xb / 3.0);

  Tensor b = empty({128, 64, 3, 3});
  nn::init::kaiming_normal_(b, 0.0, nn::init::FanMode::fan_in, "relu");
  const double kstd = std::sqrt(2.0 / (64.0 * 9.0));
  s = stats_of(b);
  EXPECT_NEAR(std::sqrt(s.var), kstd, 0.02 * kstd);
  EXPECT_NEAR(s.mean, 0.0, 0.02 * kstd);

  Tensor c = empty({400, 100});
  nn::init::xavier_normal_(c, 2.0);
  s = stats_of(c);
  EXPECT_NEAR(std::sqrt(s.var), 2.0 * std::sqrt(2.0 / 500.0), 0.03 * 2.0 * std::sqrt(2.0 / 500.0));

  Tensor d = empty({50, 400});  // fan_out = 50
  nn::init::kaiming_uniform_(d, 0.0, nn::init::FanMode::fan_out, "relu");
  const double kb = std::sqrt(3.0) * std::sqrt(2.0) / std::sqrt(50.0);
  s = stats_of(d);
  EXPECT_LE(s.max_abs, kb);
  EXPECT_GE(s.max_abs, 0.99 * kb);

  Tensor e = empty({3, 4});
  nn::init::constant_(e, 2.5);
  EXPECT_EQ(values_of(e), std::vector<double>(12, 2.5));
  nn::init::zeros_(e);
  EXPECT_EQ(values_of(e), std::vector<double>(12, 0.0));
  nn::init::ones_(e);
  EXPECT_EQ(values_of(e), std::vector<double>(12, 1.0));
  nn::init::uniform_(e, 3.0, 4.0);
  for (double v : values_of(e)) EXPECT_TRUE(v >= 3.0 && v < 4.0) << v;
}

// ------------------------------------------------------------------------------------ forwards
TEST(LayerForward, LinearMatchesReference) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  manual_seed(seed);
  nn::Linear lin(5, 3);
  lin.to(DType::f64);
  const Tensor x = random_tensor({4, 5}, seed + 1);
  const std::vector<double> xv = values_of(x), w = values_of(lin.weight), b = values_of(lin.bias);
  std::vector<double> ref(12);
  for (int n = 0; n < 4; ++n)
    for (int o = 0; o < 3; ++o) {
      double acc = b[o];
      for (int i = 0; i < 5; ++i) acc += xv[n * 5 + i] * w[o * 5 + i];
      ref[n * 3 + o] = acc;
    }
  EXPECT_TRUE(all_close(lin(x), tensor(ref, {4, 3}, {.dtype = DType::f64}), 1e-12, 1e-12));
}

TEST(LayerForward, Conv2dMatchesReference) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  manual_seed(seed);
  const int64_t N = 2, C = 4, H = 7, W = 6, O = 6, G = 2, KH = 3, KW = 2, S = 2, P = 1, D = 1;
  nn::Conv2d conv(C, O, {KH, KW}, {.stride = S, .padding = P, .dilation = D, .groups = G});
  conv.to(DType::f64);
  const Tensor x = random_tensor({N, C, H, W}, seed + 1);
  const Tensor y = conv(x);
  const int64_t OH = (H + 2 * P - D * (KH - 1) - 1) / S + 1,
                OW = (W + 2 * P - D * (KW - 1) - 1) / S + 1;
  ASSERT_EQ(y.sizes(), (Shape{N, O, OH, OW}));
  const auto xv = values_of(x), wv = values_of(conv.weight), bv = values_of(conv.bias);
  const int64_t CG = C / G, OG = O / G;
  std::vector<double> ref(static_cast<size_t>(N * O * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bv[o];
          const int64_t g = o / OG;
          for (int64_t c = 0; c < CG; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * S - P + kh * D, iw = ow * S - P + kw * D;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += xv[((n * C + g * CG + c) * H + ih) * W + iw] *
                       wv[((o * CG + c) * KH + kh) * KW + kw];
              }
          ref[((n * O + o) * OH + oh) * OW + ow] = acc;
        }
  EXPECT_TRUE(all_close(y, tensor(ref, {N, O, OH, OW}, {.dtype = DType::f64}), 1e-10, 1e-12));
}

TEST(LayerForward, PoolingFlattenAndActivations) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  const Tensor x = random_tensor({2, 3, 5, 5}, seed);
  const auto xv = values_of(x);
  auto at = [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    return xv[((n * 3 + c) * 5 + h) * 5 + w];
  };
  std::vector<double> mx, av, ad;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t oh = 0; oh < 2; ++oh)
        for (int64_t ow = 0; ow < 2; ++ow) {
          double m = -1e300, s = 0;
          for (int64_t i = 0; i < 2; ++i)
            for (int64_t j = 0; j < 2; ++j) {
              m = std::max(m, at(n, c, 2 * oh + i, 2 * ow + j));
              s += at(n, c, 2 * oh + i, 2 * ow + j);
            }
          mx.push_back(m);
          av.push_back(s / 4);
        }
      double s = 0;
      for (int64_t h = 0; h < 5; ++h)
        for (int64_t w = 0; w < 5; ++w) s += at(n, c, h, w);
      ad.push_back(s / 25);
    }
  const TensorOptions f64{.dtype = DType::f64};
  EXPECT_TRUE(all_close(nn::MaxPool2d(2)(x), tensor(mx, {2, 3, 2, 2}, f64), 0, 0));
  EXPECT_TRUE(all_close(nn::AvgPool2d(2)(x), tensor(av, {2, 3, 2, 2}, f64), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(nn::AdaptiveAvgPool2d(1)(x), tensor(ad, {2, 3, 1, 1}, f64), 1e-12, 1e-14));
  // padding 1 with count_include_pad: the corner window averages 4 values over 9.
  const Tensor padded = nn::AvgPool2d(3, 1, 1)(x);
  EXPECT_EQ(padded.sizes(), (Shape{2, 3, 5, 5}));
  EXPECT_NEAR(values_of(padded)[0],
              (at(0, 0, 0, 0) + at(0, 0, 0, 1) + at(0, 0, 1, 0) + at(0, 0, 1, 1)) / 9, 1e-12);

  EXPECT_EQ(nn::Flatten()(x).sizes(), (Shape{2, 75}));
  EXPECT_EQ(nn::Flatten(0, 1)(x).sizes(), (Shape{6, 5, 5}));

  const Tensor z = random_tensor({40}, seed + 1, -3, 3);
  const auto zv = values_of(z);
  auto check = [&](nn::Module& m, auto fn, double tol) {
    std::vector<double> ref;
    for (double v : zv) ref.push_back(fn(v));
    EXPECT_TRUE(all_close(m(z), tensor(ref, {40}, f64), tol, tol)) << m.repr();
  };
  nn::ReLU relu_m;
  nn::LeakyReLU leaky(0.2);
  nn::Sigmoid sig;
  nn::Tanh th;
  nn::SiLU si;
  nn::GELU ge;
  nn::Identity id;
  check(
      relu_m, [](double v) { return v > 0 ? v : 0.0; }, 0);
  check(
      leaky, [](double v) { return v > 0 ? v : 0.2 * v; }, 1e-15);
  check(
      sig, [](double v) { return 1 / (1 + std::exp(-v)); }, 1e-12);
  check(
      th, [](double v) { return std::tanh(v); }, 1e-12);
  check(
      si, [](double v) { return v / (1 + std::exp(-v)); }, 1e-12);
  check(
      ge, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, 1e-12);
  check(
      id, [](double v) { return v; }, 0);
}

TEST(LayerForward, LayerNormAndEmbedding) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  nn::LayerNorm ln(6);
  ln.to(DType::f64);
  assign(ln.weight, random_tensor({6}, seed));
  assign(ln.bias, random_tensor({6}, seed + 1));
  const Tensor x = random_tensor({4, 6}, seed + 2, -2, 2);
  const auto xv = values_of(x), w = values_of(ln.weight), b = values_of(ln.bias);
  std::vector<double> ref;
  for (int r = 0; r < 4; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < 6; ++i) m += xv[r * 6 + i] / 6;
    for (int i = 0; i < 6; ++i) v += (xv[r * 6 + i] - m) * (xv[r * 6 + i] - m) / 6;
    for (int i = 0; i < 6; ++i)
      ref.push_back((xv[r * 6 + i] - m) / std::sqrt(v + 1e-5) * w[i] + b[i]);
  }
  EXPECT_TRUE(all_close(ln(x), tensor(ref, {4, 6}, {.dtype = DType::f64}), 1e-10, 1e-12));

  manual_seed(seed);
  nn::Embedding emb(10, 4);
  const Tensor idx = tensor({3, 0, 9, 3, 7, 1}, {2, 3}, {.dtype = DType::i64});
  const Tensor out = emb(idx);
  ASSERT_EQ(out.sizes(), (Shape{2, 3, 4}));
  const auto table = values_of(emb.weight), ov = values_of(out);
  const int rows[] = {3, 0, 9, 3, 7, 1};
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(ov[i * 4 + j], table[rows[i] * 4 + j]);
}

// -------------------------------------------------------------------------- train / eval modes
TEST(LayerModes, DropoutTrainsAndIsIdentityInEval) {
  manual_seed(fresh_seed());
  nn::Dropout drop(0.3);
  const Tensor x = random_tensor({1000, 100}, fresh_seed(), 0.5, 1.5, DType::f32);
  const auto xv = values_of(x);
  const auto yv = values_of(drop(x));
  size_t zeros_count = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0) {
      ++zeros_count;
    } else {
      EXPECT_NEAR(yv[i], xv[i] / 0.7, 1e-5) << i;
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros_count) / xv.size(), 0.3, 0.01);
  drop.eval();
  EXPECT_EQ(values_of(drop(x)), xv);
  EXPECT_THROW(nn::Dropout(1.5), ValueError);
}

struct ChannelStats {
  std::vector<double> mean, var_biased, var_unbiased;
};

ChannelStats channel_stats(const std::vector<double>& x, int64_t N, int64_t C, int64_t S) {
  ChannelStats st;
  const double count = static_cast<double>(N * S);
  for (int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) m += x[(n * C + c) * S + s];
    m /= count;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) v += std::pow(x[(n * C + c) * S + s] - m, 2);
    st.mean.push_back(m);
    st.var_biased.push_back(v / count);
    st.var_unbiased.push_back(v / (count - 1));
  }
  return st;
}

TEST(LayerModes, BatchNorm2dTrainingEvalAndRunningStats) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t N = 4, C = 3, H = 5, W = 5, S = H * W;
  nn::BatchNorm2d bn(C);
  bn.to(DType::f64);
  assign(bn.weight, random_tensor({C}, seed, 0.5, 1.5));
  assign(bn.bias, random_tensor({C}, seed + 1));
  const auto w = values_of(bn.weight), b = values_of(bn.bias);

  const Tensor x = random_tensor({N, C, H, W}, seed + 2, -1, 3);
  const auto xv = values_of(x);
  const ChannelStats st = channel_stats(xv, N, C, S);
  auto normalise = [&](const std::vector<double>& mean, const std::vector<double>& var) {
    std::vector<double> ref(xv.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = (n * C + c) * S + s;
          ref[i] = (xv[i] - mean[c]) / std::sqrt(var[c] + 1e-5) * w[c] + b[c];
        }
    return tensor(ref, {N, C, H, W}, {.dtype = DType::f64});
  };

  EXPECT_TRUE(all_close(bn(x), normalise(st.mean, st.var_biased), 1e-10, 1e-12));
  std::vector<double> rm(C), rv(C);
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = 0.1 * st.mean[c];
    rv[c] = 0.9 + 0.1 * st.var_unbiased[c];
  }
  EXPECT_TRUE(all_close(bn.running_mean, tensor(rm, {C}, {.dtype = DType::f64}), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(bn.running_var, tensor(rv, {C}, {.dtype = DType::f64}), 1e-12, 1e-14));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = 0.9 * rm[c] + 0.1 * st.mean[c];
    rv[c] = 0.9 * rv[c] + 0.1 * st.var_unbiased[c];
  }
  EXPECT_TRUE(all_close(bn.running_mean, tensor(rm, {C}, {.dtype = DType::f64}), 1e-12, 1e-14));

  // Eval: running statistics, no updates.
  bn.eval();
  EXPECT_TRUE(all_close(bn(x), normalise(rm, rv), 1e-10, 1e-12));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  EXPECT_TRUE(all_close(bn.running_mean, tensor(rm, {C}, {.dtype = DType::f64}), 1e-12, 1e-14));

  // Without running stats, eval mode still normalises with the batch statistics.
  nn::BatchNorm2d plain(C, 1e-5, 0.1, false, false);
  plain.to(DType::f64).eval();
  std::vector<double> ref(xv.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = (n * C + c) * S + s;
        ref[i] = (xv[i] - st.mean[c]) / std::sqrt(st.var_biased[c] + 1e-5);
      }
  EXPECT_TRUE(all_close(plain(x), tensor(ref, {N, C, H, W}, {.dtype = DType::f64}), 1e-10, 1e-12));

  EXPECT_THROW(bn(random_tensor({N, C}, seed)), ShapeError);
}

TEST(LayerModes, BatchNorm1dCumulativeAverage) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  nn::BatchNorm1d bn(5, 1e-5, std::nullopt);  // momentum=None: cumulative moving average
  bn.to(DType::f64);
  const Tensor x1 = random_tensor({8, 5}, seed), x2 = random_tensor({8, 5}, seed + 1, 0, 4);
  bn(x1);
  bn(x2);
  const ChannelStats s1 = channel_stats(values_of(x1), 8, 5, 1),
                     s2 = channel_stats(values_of(x2), 8, 5, 1);
  std::vector<double> rm, rv;
  for (int c = 0; c < 5; ++c) {
    rm.push_back((s1.mean[c] + s2.mean[c]) / 2);
    rv.push_back((s1.var_unbiased[c] + s2.var_unbiased[c]) / 2);
  }
  EXPECT_TRUE(all_close(bn.running_mean, tensor(rm, {5}, {.dtype = DType::f64}), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(bn.running_var, tensor(rv, {5}, {.dtype = DType::f64}), 1e-12, 1e-14));
  EXPECT_THROW(bn(random_tensor({2, 5, 3, 3}, seed)), ShapeError);
}

// --------------------------------------------------------------------------------------- models
TEST(Models, MlpFlattensImagesAndChains) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  manual_seed(seed);
  nn::MLP mlp({12, 5, 3});
  const Tensor x = random_tensor({2, 3, 2, 2}, seed + 1, -1, 1, DType::f32);
  auto l1 = mlp.at<nn::Linear>(0), l2 = mlp.at<nn::Linear>(2);
  EXPECT_TRUE(all_close(mlp(x), (*l2)(relu((*l1)(x.reshape({2, 12})))), 1e-6, 1e-7));
  EXPECT_THROW(nn::MLP({5}), ValueError);
  EXPECT_THROW(nn::MLP({5, 3}, "swish"), ValueError);
}

TEST(Models, CnnsRunForwardAndBackward) {
  manual_seed(fresh_seed());
  for (const char* name : {"cnn", "cnn-bench", "mlp", "mlp-bench"}) {
    SCOPED_TRACE(name);
    auto model = nn::make_model(name);
    const Tensor x = random_tensor({3, 1, 28, 28}, fresh_seed(), 0, 1, DType::f32);
    const Tensor y = (*model)(x);
    ASSERT_EQ(y.sizes(), (Shape{3, 10}));
    y.sum().backward();
    for (const auto& [pname, p] : model->named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << pname;
      EXPECT_EQ(p.grad().sizes(), p.sizes()) << pname;
    }
  }
}

}  // namespace
}  // namespace gradus
