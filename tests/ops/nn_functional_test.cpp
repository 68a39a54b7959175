// NN functional ops (softmax, losses, conv/pool, norms, dropout) against naive float64
// references, with finite-difference gradients and error checks.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "ops/gradcheck.h"

namespace gradus {
namespace {

using testing::fresh_seed;
using testing::grad_input;
using testing::gradcheck;
using testing::index_tensor;
using testing::random_ints;
using testing::random_tensor;
using testing::ravel;
using testing::unravel;
using testing::values_match;

using Line = std::vector<double>;

// Applies f to every 1-D line of x along `dim` (reference helper).
std::vector<double> along_dim(const Tensor& x, int64_t dim,
                              const std::function<Line(const Line&)>& f) {
  const Shape shape = x.sizes();
  dim = dim < 0 ? dim + x.dim() : dim;
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> pos = unravel(i, shape);
    if (pos[dim] != 0) continue;
    Line line;
    for (int64_t k = 0; k < shape[dim]; ++k) {
      pos[dim] = k;
      line.push_back(v[ravel(pos, shape)]);
    }
    const Line r = f(line);
    for (int64_t k = 0; k < shape[dim]; ++k) {
      pos[dim] = k;
      out[ravel(pos, shape)] = r[k];
    }
  }
  return out;
}

Line ref_log_softmax(const Line& l) {
  const double m = *std::max_element(l.begin(), l.end());
  double s = 0;
  for (double v : l) s += std::exp(v - m);
  Line out;
  for (double v : l) out.push_back(v - m - std::log(s));
  return out;
}
Line ref_softmax(const Line& l) {
  Line out = ref_log_softmax(l);
  for (double& v : out) v = std::exp(v);
  return out;
}

// ---------------------------------------------------------------------------------- softmax
TEST(Softmax, MatchesReferenceAlongEveryDim) {
  const Tensor x = random_tensor({3, 4, 5}, fresh_seed(), -3, 3);
  for (int64_t dim : {0, 1, 2, -1}) {
    EXPECT_TRUE(values_match(softmax(x, dim), x.sizes(), along_dim(x, dim, ref_softmax), 1e-12));
    EXPECT_TRUE(
        values_match(log_softmax(x, dim), x.sizes(), along_dim(x, dim, ref_log_softmax), 1e-12));
  }
  // Non-contiguous input, large logits (stability), f32.
  const Tensor xt = random_tensor({5, 4}, fresh_seed(), 500, 1000).t();
  EXPECT_TRUE(values_match(softmax(xt, 1), {4, 5}, along_dim(xt, 1, ref_softmax), 1e-12));
  const Tensor xf = random_tensor({7, 9}, fresh_seed()).to(DType::f32);
  EXPECT_TRUE(values_match(log_softmax(xf, 0), {7, 9},
                           along_dim(xf.to(DType::f64), 0, ref_log_softmax), 1e-5, 1e-6));
  // A 0-d input and an empty one.
  EXPECT_TRUE(values_match(softmax(scalar_tensor(3.0, {.dtype = DType::f64}), 0), {}, {1.0}));
  EXPECT_TRUE(values_match(softmax(zeros({0, 3}, {.dtype = DType::f64}), 1), {0, 3}, {}));
}

TEST(Softmax, Gradients) {
  const Tensor x = grad_input({3, 4, 2}, fresh_seed(), -2, 2);
  for (int64_t dim : {0, 1, 2}) {
    EXPECT_TRUE(gradcheck([&](const auto& in) { return softmax(in[0], dim); }, {x}));
    EXPECT_TRUE(gradcheck([&](const auto& in) { return log_softmax(in[0], dim); }, {x}));
  }
  EXPECT_TRUE(gradcheck([](const auto& in) { return log_softmax(in[0].transpose(0, 2), 1); }, {x}));
}

// ---------------------------------------------------------------------------- cross entropy
struct CeRef {
  std::vector<double> per_row;  // reduction = none
  double sum = 0, denom = 0;
};

// PyTorch's definition on [rows, C] logits: (1 - eps) * nll + eps / C * sum_c -w_c log p_c,
// ignored rows contribute 0; 'mean' divides by the summed weight of the targets.
CeRef ref_cross_entropy(const std::vector<double>& logits, int64_t c,
                        const std::vector<int64_t>& target, const std::vector<double>& weight,
                        int64_t ignore, double eps) {
  CeRef r;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == ignore) {
      r.per_row.push_back(0.0);
      continue;
    }
    const Line lp = ref_log_softmax(Line(logits.begin() + i * c, logits.begin() + (i + 1) * c));
    auto w = [&](int64_t k) { return weight.empty() ? 1.0 : weight[k]; };
    double smooth = 0;
    for (int64_t k = 0; k < c; ++k) smooth -= w(k) * lp[k];
    const double loss = (1 - eps) * (-w(target[i]) * lp[target[i]]) + eps / c * smooth;
    r.per_row.push_back(loss);
    r.sum += loss;
    r.denom += w(target[i]);
  }
  return r;
}

TEST(CrossEntropy, MatchesReferenceForEveryOption) {
  const uint64_t s = fresh_seed();
  const int64_t n = 6, c = 5;
  const Tensor logits = random_tensor({n, c}, s, -3, 3);
  std::vector<int64_t> tv = random_ints(n, 0, c, s + 1);
  tv[2] = -100;  // one ignored row
  const Tensor target = index_tensor(tv, {n});
  const Tensor weight = random_tensor({c}, s + 2, 0.2, 2.0);
  const std::vector<double> lv = logits.to_vector<double>(), wv = weight.to_vector<double>();
  for (bool weighted : {false, true}) {
    for (double eps : {0.0, 0.1}) {
      SCOPED_TRACE(std::string(weighted ? "weighted" : "unweighted") + " eps " +
                   std::to_string(eps));
      CrossEntropyOptions o;
      if (weighted) o.weight = weight;
      o.label_smoothing = eps;
      const CeRef r =
          ref_cross_entropy(lv, c, tv, weighted ? wv : std::vector<double>(), -100, eps);
      o.reduction = Reduction::none;
      EXPECT_TRUE(values_match(cross_entropy(logits, target, o), {n}, r.per_row, 1e-10));
      o.reduction = Reduction::sum;
      EXPECT_TRUE(values_match(cross_entropy(logits, target, o), {}, {r.sum}, 1e-10));
      o.reduction = Reduction::mean;
      EXPECT_TRUE(values_match(cross_entropy(logits, target, o), {}, {r.sum / r.denom}, 1e-10));
      // nll_loss(log_softmax) agrees when there is no smoothing.
      if (eps == 0.0) {
        EXPECT_TRUE(values_match(nll_loss(log_softmax(logits, 1), target, o), {}, {r.sum / r.denom},
                                 1e-10));
      }
    }
  }
  // f32 logits, int32 targets, a custom ignore_index.
  CrossEntropyOptions o;
  o.ignore_index = 1;
  std::vector<int64_t> t_ok = tv;
  for (int64_t& t : t_ok) t = t < 0 ? 0 : t;
  const Tensor lf = logits.to(DType::f32);
  const CeRef r = ref_cross_entropy(lf.to_vector<double>(), c, t_ok, {}, 1, 0.0);
  const Tensor out = cross_entropy(lf, index_tensor(t_ok, {n}, DType::i32), o);
  EXPECT_EQ(out.dtype(), DType::f32);
  EXPECT_TRUE(values_match(out, {}, {r.sum / r.denom}, 1e-5, 1e-6));
}

TEST(CrossEntropy, SpatialLogitsAndUnbatched) {
  const uint64_t s = fresh_seed();
  const int64_t n = 2, c = 4, h = 3, w = 2;
  const Tensor logits = random_tensor({n, c, h, w}, s, -2, 2);
  const std::vector<int64_t> tv = random_ints(n * h * w, 0, c, s + 1);
  const Tensor target = index_tensor(tv, {n, h, w});
  // Reference: move classes last by hand.
  const std::vector<double> lv = logits.to_vector<double>();
  std::vector<double> rows;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t p = 0; p < h * w; ++p) {
      for (int64_t k = 0; k < c; ++k) rows.push_back(lv[(i * c + k) * h * w + p]);
    }
  }
  const CeRef r = ref_cross_entropy(rows, c, tv, {}, -100, 0.05);
  CrossEntropyOptions o;
  o.label_smoothing = 0.05;
  o.reduction = Reduction::none;
  EXPECT_TRUE(values_match(cross_entropy(logits, target, o), {n, h, w}, r.per_row, 1e-10));
  o.reduction = Reduction::mean;
  EXPECT_TRUE(values_match(cross_entropy(logits, target, o), {}, {r.sum / r.denom}, 1e-10));
  // Unbatched [C] logits with a 0-d target.
  const Tensor l1 = random_tensor({c}, s + 2);
  const CeRef r1 = ref_cross_entropy(l1.to_vector<double>(), c, {2}, {}, -100, 0.0);
  EXPECT_TRUE(values_match(cross_entropy(l1, index_tensor({2}, {})), {}, {r1.sum}, 1e-10));
}

TEST(CrossEntropy, Gradients) {
  const uint64_t s = fresh_seed();
  std::vector<int64_t> tv = random_ints(5, 0, 4, s);
  tv[1] = -100;
  const Tensor target = index_tensor(tv, {5});
  const Tensor weight = random_tensor({4}, s + 1, 0.5, 2.0);
  for (Reduction red : {Reduction::none, Reduction::sum, Reduction::mean}) {
    for (bool weighted : {false, true}) {
      CrossEntropyOptions o;
      o.reduction = red;
      o.label_smoothing = 0.1;
      if (weighted) o.weight = weight;
      EXPECT_TRUE(gradcheck([&](const auto& in) { return cross_entropy(in[0], target, o); },
                            {grad_input({5, 4}, s + 2, -2, 2)}));
      o.label_smoothing = 0.0;
      EXPECT_TRUE(gradcheck([&](const auto& in) { return nll_loss(in[0], target, o); },
                            {grad_input({5, 4}, s + 3, -2, 0)}));
    }
  }
  const Tensor t3 = index_tensor(random_ints(6, 0, 3, s + 4), {2, 3});
  EXPECT_TRUE(gradcheck([&](const auto& in) { return cross_entropy(in[0], t3); },
                        {grad_input({2, 3, 3}, s + 5, -2, 2)}));
}

TEST(CrossEntropy, Errors) {
  const Tensor logits = random_tensor({4, 10}, fresh_seed());
  GRADUS_EXPECT_ERROR(cross_entropy(logits, index_tensor({0, 1, 12, 2}, {4})), IndexError,
                      "cross_entropy", "12", "10 classes");
  GRADUS_EXPECT_ERROR(cross_entropy(logits, index_tensor({0, 1, -3, 2}, {4})), IndexError,
                      "cross_entropy", "-3");
  GRADUS_EXPECT_ERROR(cross_entropy(logits, index_tensor({0, 1, 2}, {3})), ShapeError,
                      "cross_entropy", "[3]", "[4, 10]", "[4]");
  GRADUS_EXPECT_ERROR(cross_entropy(logits, zeros({4, 10})), DTypeError, "cross_entropy",
                      "probabilit");
  GRADUS_EXPECT_ERROR(cross_entropy(logits, zeros({4}, {.dtype = DType::u8})), DTypeError,
                      "cross_entropy", "uint8");
  GRADUS_EXPECT_ERROR(cross_entropy(index_tensor({0, 1}, {1, 2}), index_tensor({0}, {1})),
                      DTypeError, "cross_entropy");
  CrossEntropyOptions o;
  o.weight = zeros({3});
  GRADUS_EXPECT_ERROR(cross_entropy(logits, index_tensor({0, 1, 2, 3}, {4}), o), ShapeError,
                      "cross_entropy", "weight");
  o.weight = Tensor();
  o.label_smoothing = 1.5;
  GRADUS_EXPECT_ERROR(cross_entropy(logits, index_tensor({0, 1, 2, 3}, {4}), o), ValueError,
                      "cross_entropy", "label_smoothing");
  GRADUS_EXPECT_ERROR(nll_loss(logits, index_tensor({0, 1, 2, 3}, {4}), o), ValueError, "nll_loss");
  GRADUS_EXPECT_ERROR(nll_loss(logits, index_tensor({0, 1, 2, 10}, {4})), IndexError, "nll_loss",
                      "10");
}

// ---------------------------------------------------------------------------- mse, bce
TEST(MseLoss, ReferenceGradientsAndShapeCheck) {
  const uint64_t s = fresh_seed();
  const Tensor a = random_tensor({3, 4}, s), b = random_tensor({3, 4}, s + 1);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> sq;
  double total = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    sq.push_back((av[i] - bv[i]) * (av[i] - bv[i]));
    total += sq.back();
  }
  EXPECT_TRUE(values_match(mse_loss(a, b, Reduction::none), {3, 4}, sq));
  EXPECT_TRUE(values_match(mse_loss(a, b, Reduction::sum), {}, {total}));
  EXPECT_TRUE(values_match(mse_loss(a, b), {}, {total / 12}));
  EXPECT_TRUE(gradcheck([](const auto& in) { return mse_loss(in[0], in[1]); },
                        {grad_input({3, 4}, s + 2), grad_input({3, 4}, s + 3)}));
  GRADUS_EXPECT_ERROR(mse_loss(zeros({8, 1}), zeros({8})), ShapeError, "mse_loss", "[8, 1]", "[8]");
}

TEST(BceWithLogits, StableReferenceAndGradients) {
  const uint64_t s = fresh_seed();
  Tensor x = random_tensor({4, 3}, s, -5, 5);
  // Extreme logits must stay finite.
  std::vector<double> xv = x.to_vector<double>();
  xv[0] = 200;
  xv[1] = -200;
  x = tensor(xv, {4, 3}, {.dtype = DType::f64});
  const Tensor t = random_tensor({4, 3}, s + 1, 0, 1);
  const Tensor pw = random_tensor({3}, s + 2, 0.5, 3);
  const std::vector<double> tv = t.to_vector<double>(), pv = pw.to_vector<double>();
  // Reference via log-sigmoid computed stably in long double.
  auto log_sigmoid = [](double v) {
    const long double z = v;
    return static_cast<double>(z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z)));
  };
  for (bool with_pw : {false, true}) {
    std::vector<double> ref;
    double total = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      const double p = with_pw ? pv[i % 3] : 1.0;
      const double l = -(p * tv[i] * log_sigmoid(xv[i]) + (1 - tv[i]) * log_sigmoid(-xv[i]));
      ref.push_back(l);
      total += l;
    }
    const Tensor pos = with_pw ? pw : Tensor();
    EXPECT_TRUE(values_match(binary_cross_entropy_with_logits(x, t, Reduction::none, pos), {4, 3},
                             ref, 1e-10, 1e-12));
    EXPECT_TRUE(values_match(binary_cross_entropy_with_logits(x, t, Reduction::mean, pos), {},
                             {total / 12}, 1e-10));
    EXPECT_TRUE(gradcheck(
        [&](const auto& in) {
          return binary_cross_entropy_with_logits(in[0], in[1], Reduction::sum, pos);
        },
        {grad_input({4, 3}, s + 3, -4, 4), grad_input({4, 3}, s + 4, 0, 1)}));
  }
  GRADUS_EXPECT_ERROR(binary_cross_entropy_with_logits(zeros({4, 3}), zeros({4})), ShapeError,
                      "binary_cross_entropy_with_logits");
  GRADUS_EXPECT_ERROR(binary_cross_entropy_with_logits(zeros({4}), index_tensor({0, 1, 0, 1}, {4})),
                      DTypeError, "binary_cross_entropy_with_logits");
}

// ---------------------------------------------------------------------------- conv2d
struct ConvCfg {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
};

std::vector<double> ref_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvCfg& c,
                               Shape* out_shape) {
  const int64_t n = x.size(0), ci = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t o = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t oh = (h + 2 * c.ph - c.dh * (kh - 1) - 1) / c.sh + 1;
  const int64_t ow = (wd + 2 * c.pw - c.dw * (kw - 1) - 1) / c.sw + 1;
  *out_shape = {n, o, oh, ow};
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  std::vector<double> out;
  for (int64_t in = 0; in < n; ++in) {
    for (int64_t oc = 0; oc < o; ++oc) {
      const int64_t g = oc / (o / c.groups);
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t z = 0; z < ow; ++z) {
          double acc = b.defined() ? bv[oc] : 0.0;
          for (int64_t k = 0; k < cg; ++k) {
            for (int64_t a = 0; a < kh; ++a) {
              for (int64_t e = 0; e < kw; ++e) {
                const int64_t iy = y * c.sh - c.ph + a * c.dh, ix = z * c.sw - c.pw + e * c.dw;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += xv[((in * ci + g * cg + k) * h + iy) * wd + ix] *
                       wv[((oc * cg + k) * kh + a) * kw + e];
              }
            }
          }
          out.push_back(acc);
        }
      }
    }
  }
  (void)ci;
  return out;
}

Conv2dOptions to_options(const ConvCfg& c) {
  Conv2dOptions o;
  o.stride = {c.sh, c.sw};
  o.padding = {c.ph, c.pw};
  o.dilation = {c.dh, c.dw};
  o.groups = c.groups;
  return o;
}

TEST(Conv2d, MatchesReferenceForStridePaddingDilationGroups) {
  const uint64_t s = fresh_seed();
  struct Case {
    Shape x, w;
    ConvCfg cfg;
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {}},
      {{1, 4, 8, 9}, {6, 2, 3, 2}, {2, 1, 1, 2, 1, 1, 2}},
      {{2, 2, 9, 9}, {2, 2, 3, 3}, {1, 2, 2, 1, 2, 1, 1}},
      {{1, 6, 5, 5}, {6, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 6}},  // depthwise
      {{3, 1, 4, 4}, {2, 1, 1, 1}, {}},                     // 1x1
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    const Tensor x = random_tensor(c.x, s + 3 * i), w = random_tensor(c.w, s + 3 * i + 1);
    const Tensor b = random_tensor({c.w[0]}, s + 3 * i + 2);
    Shape shape;
    const std::vector<double> ref = ref_conv2d(x, w, b, c.cfg, &shape);
    EXPECT_TRUE(values_match(conv2d(x, w, b, to_options(c.cfg)), shape, ref, 1e-10, 1e-12));
    const std::vector<double> ref_nb = ref_conv2d(x, w, Tensor(), c.cfg, &shape);
    EXPECT_TRUE(
        values_match(conv2d(x, w, Tensor(), to_options(c.cfg)), shape, ref_nb, 1e-10, 1e-12));
  }
  // Unbatched [C, H, W] and a non-contiguous (channels-last) input.
  const Tensor x = random_tensor({1, 3, 5, 5}, s + 50), w = random_tensor({2, 3, 3, 3}, s + 51);
  Shape shape;
  const std::vector<double> ref = ref_conv2d(x, w, Tensor(), {}, &shape);
  EXPECT_TRUE(values_match(conv2d(x.reshape({3, 5, 5}), w), {2, 3, 3}, ref, 1e-10, 1e-12));
  const Tensor xcl = x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  EXPECT_TRUE(values_match(conv2d(xcl, w), shape, ref, 1e-10, 1e-12));
}

TEST(Conv2d, Gradients) {
  const uint64_t s = fresh_seed();
  const ConvCfg cfg{2, 1, 1, 0, 1, 2, 2};
  EXPECT_TRUE(gradcheck(
      [&](const auto& in) { return conv2d(in[0], in[1], in[2], to_options(cfg)); },
      {grad_input({2, 4, 5, 6}, s), grad_input({4, 2, 2, 2}, s + 1), grad_input({4}, s + 2)}));
  EXPECT_TRUE(gradcheck([](const auto& in) { return conv2d(in[0], in[1]); },
                        {grad_input({3, 4, 4}, s + 3), grad_input({2, 3, 3, 3}, s + 4)}));
}

TEST(Conv2d, ValidatesEveryParameter) {
  const Tensor x = zeros({2, 3, 8, 8});
  GRADUS_EXPECT_ERROR(conv2d(x, zeros({4, 2, 3, 3})), ShapeError, "conv2d", "input channels",
                      "[2, 3, 8, 8]");
  Conv2dOptions o;
  o.groups = 2;
  GRADUS_EXPECT_ERROR(conv2d(x, zeros({4, 1, 3, 3}), Tensor(), o), ShapeError, "conv2d",
                      "divisible by groups");
  GRADUS_EXPECT_ERROR(conv2d(x, zeros({4, 3, 9, 9})), ShapeError, "conv2d", "larger than", "8x8");
  o = {};
  o.padding = {1, 1};
  EXPECT_NO_THROW(conv2d(x, zeros({4, 3, 9, 9}), Tensor(), o));
  o = {};
  o.stride = {0, 1};
  GRADUS_EXPECT_ERROR(conv2d(x, zeros({4, 3, 3, 3}), Tensor(), o), ValueError, "conv2d", "stride");
  o = {};
  o.dilation = {1, -1};
  GRADUS_EXPECT_ERROR(conv2d(x, zeros({4, 3, 3, 3}), Tensor(), o), ValueError, "conv2d",
                      "dilation");
  o = {};
  o.padding = {-1, 0};
  GRADUS_EXPECT_ERROR(conv2d(x, zeros({4, 3, 3, 3}), Tensor(), o), ValueError, "conv2d", "padding");
  o = {};
  o.groups = 0;
  GRADUS_EXPECT_ERROR(conv2d(x, zeros({4, 3, 3, 3}), Tensor(), o), ValueError, "conv2d", "groups");
  GRADUS_EXPECT_ERROR(conv2d(zeros({3, 8}), zeros({4, 3, 3, 3})), ShapeError, "conv2d", "[3, 8]");
  GRADUS_EXPECT_ERROR(conv2d(x, zeros({4, 3, 3})), ShapeError, "conv2d", "4-D");
  GRADUS_EXPECT_ERROR(conv2d(x, zeros({4, 3, 3, 3}), zeros({3})), ShapeError, "conv2d", "bias");
  GRADUS_EXPECT_ERROR(conv2d(x, zeros({4, 3, 3, 3}, {.dtype = DType::f64})), DTypeError, "conv2d");
}

// ---------------------------------------------------------------------------- pooling
struct PoolCfg {
  int64_t k = 2, s = 2, p = 0, d = 1;
  bool ceil = false, include_pad = true;
};

int64_t ref_pool_size(int64_t in, const PoolCfg& c) {
  int64_t out = (in + 2 * c.p - c.d * (c.k - 1) - 1 + (c.ceil ? c.s - 1 : 0)) / c.s + 1;
  if (c.ceil && (out - 1) * c.s >= in + c.p) --out;
  return out;
}

std::vector<double> ref_pool(const Tensor& x, const PoolCfg& c, bool is_max, Shape* shape) {
  const int64_t n = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t oh = ref_pool_size(h, c), ow = ref_pool_size(w, c);
  *shape = {n, ch, oh, ow};
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> out;
  for (int64_t p = 0; p < n * ch; ++p) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t z = 0; z < ow; ++z) {
        if (is_max) {
          double m = -std::numeric_limits<double>::infinity();
          for (int64_t a = 0; a < c.k; ++a) {
            for (int64_t e = 0; e < c.k; ++e) {
              const int64_t iy = y * c.s - c.p + a * c.d, ix = z * c.s - c.p + e * c.d;
              if (iy >= 0 && iy < h && ix >= 0 && ix < w) m = std::max(m, v[(p * h + iy) * w + ix]);
            }
          }
          out.push_back(m);
        } else {
          // PyTorch: the window is clipped to the padded input for the divisor, to the input
          // for the sum.
          int64_t y0 = y * c.s - c.p, x0 = z * c.s - c.p;
          int64_t y1 = std::min(y0 + c.k, h + c.p), x1 = std::min(x0 + c.k, w + c.p);
          const int64_t pool = (y1 - y0) * (x1 - x0);
          y0 = std::max<int64_t>(y0, 0);
          x0 = std::max<int64_t>(x0, 0);
          y1 = std::min(y1, h);
          x1 = std::min(x1, w);
          double acc = 0;
          for (int64_t iy = y0; iy < y1; ++iy) {
            for (int64_t ix = x0; ix < x1; ++ix) acc += v[(p * h + iy) * w + ix];
          }
          out.push_back(acc / static_cast<double>(c.include_pad ? pool : (y1 - y0) * (x1 - x0)));
        }
      }
    }
  }
  return out;
}

Pool2dOptions pool_options(const PoolCfg& c) {
  Pool2dOptions o;
  o.kernel_size = {c.k};
  o.stride = {c.s};
  o.padding = {c.p};
  o.dilation = {c.d};
  o.ceil_mode = c.ceil;
  o.count_include_pad = c.include_pad;
  return o;
}

TEST(Pool2d, MaxAndAvgMatchReference) {
  const uint64_t s = fresh_seed();
  const Tensor x = random_tensor({2, 3, 7, 8}, s);
  const std::vector<PoolCfg> cfgs = {{2, 2, 0, 1, false, true}, {3, 2, 1, 1, false, true},
                                     {3, 2, 1, 1, true, false}, {2, 2, 0, 1, true, true},
                                     {3, 1, 1, 2, false, true}, {3, 3, 1, 1, true, true}};
  for (const PoolCfg& c : cfgs) {
    SCOPED_TRACE("k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " p" +
                 std::to_string(c.p) + " d" + std::to_string(c.d) + (c.ceil ? " ceil" : "") +
                 (c.include_pad ? "" : " exclude_pad"));
    Shape shape;
    const std::vector<double> mref = ref_pool(x, c, true, &shape);
    EXPECT_TRUE(values_match(max_pool2d(x, pool_options(c)), shape, mref));
    if (c.d == 1) {
      const std::vector<double> aref = ref_pool(x, c, false, &shape);
      EXPECT_TRUE(values_match(avg_pool2d(x, pool_options(c)), shape, aref, 1e-12));
    }
  }
  // ceil_mode output sizes (PyTorch): 5 -> 2 (floor) or 3 (ceil) with k=2, s=2.
  const Tensor x5 = random_tensor({1, 1, 5, 5}, s + 1);
  EXPECT_EQ(max_pool2d(x5, pool_options({2, 2, 0, 1, false, true})).sizes(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(max_pool2d(x5, pool_options({2, 2, 0, 1, true, true})).sizes(), (Shape{1, 1, 3, 3}));
  // The last window must start inside the input (or left padding): 6, k=2, s=2, p=1, ceil -> 4.
  const Tensor x6 = random_tensor({1, 1, 6, 6}, s + 2);
  EXPECT_EQ(avg_pool2d(x6, pool_options({2, 2, 1, 1, true, true})).sizes(), (Shape{1, 1, 4, 4}));
  // Unbatched input.
  Shape shape;
  const std::vector<double> ref = ref_pool(x5, {2, 1, 0, 1, false, true}, true, &shape);
  EXPECT_TRUE(
      values_match(max_pool2d(x5.reshape({1, 5, 5}), pool_options({2, 1, 0, 1})), {1, 4, 4}, ref));
}

TEST(Pool2d, AdaptiveAvgMatchesReference) {
  const Tensor x = random_tensor({2, 3, 7, 5}, fresh_seed());
  const std::vector<double> v = x.to_vector<double>();
  for (const auto& os : std::vector<std::vector<int64_t>>{{1, 1}, {3, 2}, {7, 5}, {4}}) {
    const int64_t oh = os[0], ow = os.size() == 2 ? os[1] : os[0];
    std::vector<double> ref;
    for (int64_t p = 0; p < 6; ++p) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t y0 = i * 7 / oh, y1 = ((i + 1) * 7 + oh - 1) / oh;
          const int64_t x0 = j * 5 / ow, x1 = ((j + 1) * 5 + ow - 1) / ow;
          double acc = 0;
          for (int64_t y = y0; y < y1; ++y) {
            for (int64_t z = x0; z < x1; ++z) acc += v[(p * 7 + y) * 5 + z];
          }
          ref.push_back(acc / static_cast<double>((y1 - y0) * (x1 - x0)));
        }
      }
    }
    EXPECT_TRUE(values_match(adaptive_avg_pool2d(x, os), {2, 3, oh, ow}, ref, 1e-12));
  }
}

TEST(Pool2d, Gradients) {
  const uint64_t s = fresh_seed();
  for (const PoolCfg& c : std::vector<PoolCfg>{
           {2, 2, 0, 1, false, true}, {3, 2, 1, 1, true, false}, {3, 1, 1, 2, false, true}}) {
    EXPECT_TRUE(gradcheck([&](const auto& in) { return max_pool2d(in[0], pool_options(c)); },
                          {grad_input({2, 2, 6, 5}, s)}));
    if (c.d == 1) {
      EXPECT_TRUE(gradcheck([&](const auto& in) { return avg_pool2d(in[0], pool_options(c)); },
                            {grad_input({2, 2, 6, 5}, s + 1)}));
    }
  }
  EXPECT_TRUE(gradcheck(
      [](const auto& in) {
        return adaptive_avg_pool2d(in[0], {3, 2});
      },
      {grad_input({2, 2, 7, 5}, s + 2)}));
}

TEST(Pool2d, Errors) {
  const Tensor x = zeros({1, 1, 4, 4});
  Pool2dOptions o;
  o.kernel_size = {0, 2};
  GRADUS_EXPECT_ERROR(max_pool2d(x, o), ValueError, "max_pool2d", "kernel_size");
  o = {};
  o.padding = {2, 2};
  GRADUS_EXPECT_ERROR(max_pool2d(x, o), ValueError, "max_pool2d", "half");
  o = {};
  o.stride = {0};
  GRADUS_EXPECT_ERROR(avg_pool2d(x, o), ValueError, "avg_pool2d", "stride");
  o = {};
  o.kernel_size = {5, 5};
  GRADUS_EXPECT_ERROR(max_pool2d(x, o), ShapeError, "max_pool2d", "too small");
  o = {};
  o.dilation = {2, 2};
  GRADUS_EXPECT_ERROR(avg_pool2d(x, o), ValueError, "avg_pool2d", "dilation");
  GRADUS_EXPECT_ERROR(max_pool2d(zeros({4, 4}), {}), ShapeError, "max_pool2d", "[4, 4]");
  GRADUS_EXPECT_ERROR(adaptive_avg_pool2d(x, {0, 1}), ValueError, "adaptive_avg_pool2d");
}

// ---------------------------------------------------------------------------- batch norm
TEST(BatchNorm, TrainingNormalisesAndUpdatesRunningStats) {
  const uint64_t s = fresh_seed();
  const int64_t n = 4, c = 3, h = 2, w = 3;
  const Tensor x = random_tensor({n, c, h, w}, s, -2, 3);
  const Tensor weight = random_tensor({c}, s + 1, 0.5, 1.5), bias = random_tensor({c}, s + 2);
  const Tensor rm0 = random_tensor({c}, s + 3), rv0 = random_tensor({c}, s + 4, 0.5, 2);
  Tensor rm = rm0.clone(), rv = rv0.clone();
  const double momentum = 0.3, eps = 1e-5;
  const Tensor y = batch_norm(x, rm, rv, weight, bias, true, momentum, eps);
  const std::vector<double> xv = x.to_vector<double>(), wv = weight.to_vector<double>(),
                            bv = bias.to_vector<double>(), rm0v = rm0.to_vector<double>(),
                            rv0v = rv0.to_vector<double>();
  std::vector<double> ref(xv.size()), rm_ref, rv_ref;
  const int64_t m = n * h * w;
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t p = 0; p < h * w; ++p) mean += xv[(i * c + ch) * h * w + p];
    }
    mean /= m;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t p = 0; p < h * w; ++p) {
        const double d = xv[(i * c + ch) * h * w + p] - mean;
        var += d * d;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t p = 0; p < h * w; ++p) {
        const int64_t k = (i * c + ch) * h * w + p;
        ref[k] = (xv[k] - mean) / std::sqrt(var / m + eps) * wv[ch] + bv[ch];
      }
    }
    rm_ref.push_back((1 - momentum) * rm0v[ch] + momentum * mean);
    rv_ref.push_back((1 - momentum) * rv0v[ch] + momentum * var / (m - 1));
  }
  EXPECT_TRUE(values_match(y, x.sizes(), ref, 1e-9, 1e-10));
  EXPECT_TRUE(values_match(rm, {c}, rm_ref, 1e-10));
  EXPECT_TRUE(values_match(rv, {c}, rv_ref, 1e-10));

  // Eval mode uses the running statistics.
  const Tensor ye = batch_norm(x, rm, rv, weight, bias, false, momentum, eps);
  const std::vector<double> rmv = rm.to_vector<double>(), rvv = rv.to_vector<double>();
  std::vector<double> eref(xv.size());
  for (size_t k = 0; k < xv.size(); ++k) {
    const int64_t ch = static_cast<int64_t>(k) / (h * w) % c;
    eref[k] = (xv[k] - rmv[ch]) / std::sqrt(rvv[ch] + eps) * wv[ch] + bv[ch];
  }
  EXPECT_TRUE(values_match(ye, x.sizes(), eref, 1e-10));
  EXPECT_TRUE(values_match(rm, {c}, rm_ref, 1e-10));  // untouched by eval

  // [N, C] input without affine parameters or running stats.
  const Tensor x2 = random_tensor({5, 2}, s + 5);
  const Tensor y2 = batch_norm(x2, Tensor(), Tensor(), Tensor(), Tensor(), true);
  const std::vector<double> x2v = x2.to_vector<double>();
  std::vector<double> ref2(10);
  for (int ch = 0; ch < 2; ++ch) {
    double mean = 0, var = 0;
    for (int i = 0; i < 5; ++i) mean += x2v[i * 2 + ch] / 5;
    for (int i = 0; i < 5; ++i) var += (x2v[i * 2 + ch] - mean) * (x2v[i * 2 + ch] - mean) / 5;
    for (int i = 0; i < 5; ++i) ref2[i * 2 + ch] = (x2v[i * 2 + ch] - mean) / std::sqrt(var + 1e-5);
  }
  EXPECT_TRUE(values_match(y2, {5, 2}, ref2, 1e-9, 1e-10));
}

TEST(BatchNorm, Gradients) {
  const uint64_t s = fresh_seed();
  EXPECT_TRUE(gradcheck(
      [](const auto& in) { return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true); },
      {grad_input({3, 2, 2, 2}, s), grad_input({2}, s + 1, 0.5, 1.5), grad_input({2}, s + 2)}));
  EXPECT_TRUE(gradcheck(
      [](const auto& in) {
        return batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true);
      },
      {grad_input({4, 3}, s + 3)}));
  const Tensor rm = random_tensor({2}, s + 4), rv = random_tensor({2}, s + 5, 0.5, 2);
  EXPECT_TRUE(
      gradcheck([&](const auto& in) { return batch_norm(in[0], rm, rv, in[1], in[2], false); },
                {grad_input({3, 2, 4}, s + 6), grad_input({2}, s + 7), grad_input({2}, s + 8)}));
}

TEST(BatchNorm, Errors) {
  GRADUS_EXPECT_ERROR(batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                      ShapeError, "batch_norm", "[4]");
  GRADUS_EXPECT_ERROR(batch_norm(zeros({4, 3}), zeros({2}), zeros({2}), Tensor(), Tensor(), true),
                      ShapeError, "batch_norm", "running_mean", "[3]");
  GRADUS_EXPECT_ERROR(batch_norm(zeros({4, 3}), Tensor(), Tensor(), zeros({4}), Tensor(), true),
                      ShapeError, "batch_norm", "weight");
  GRADUS_EXPECT_ERROR(batch_norm(zeros({1, 3}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                      ValueError, "batch_norm", "more than 1 value");
}

// ---------------------------------------------------------------------------- layer norm
TEST(LayerNorm, MatchesReferenceAndGradients) {
  const uint64_t s = fresh_seed();
  const Tensor x = random_tensor({2, 3, 4, 5}, s, -2, 2);
  const Tensor w = random_tensor({4, 5}, s + 1), b = random_tensor({4, 5}, s + 2);
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>(),
                            bv = b.to_vector<double>();
  const double eps = 1e-5;
  std::vector<double> ref(xv.size());
  for (int64_t r = 0; r < 6; ++r) {
    double mean = 0, var = 0;
    for (int64_t k = 0; k < 20; ++k) mean += xv[r * 20 + k] / 20;
    for (int64_t k = 0; k < 20; ++k) var += (xv[r * 20 + k] - mean) * (xv[r * 20 + k] - mean) / 20;
    for (int64_t k = 0; k < 20; ++k) {
      ref[r * 20 + k] = (xv[r * 20 + k] - mean) / std::sqrt(var + eps) * wv[k] + bv[k];
    }
  }
  EXPECT_TRUE(values_match(layer_norm(x, {4, 5}, w, b, eps), x.sizes(), ref, 1e-9, 1e-10));
  // Non-contiguous input (transposed leading dims keep the same rows).
  const Tensor xt = x.transpose(0, 1).contiguous().transpose(0, 1);
  EXPECT_TRUE(values_match(layer_norm(xt, {4, 5}, w, b, eps), x.sizes(), ref, 1e-9, 1e-10));

  EXPECT_TRUE(
      gradcheck([](const auto& in) { return layer_norm(in[0], {4}, in[1], in[2]); },
                {grad_input({3, 4}, s + 3), grad_input({4}, s + 4), grad_input({4}, s + 5)}));
  EXPECT_TRUE(gradcheck(
      [](const auto& in) {
        return layer_norm(in[0], {2, 3});
      },
      {grad_input({2, 2, 3}, s + 6)}));
  GRADUS_EXPECT_ERROR(layer_norm(zeros({4, 16, 512}), {768}), ShapeError, "layer_norm", "[768]",
                      "[4, 16, 512]");
  GRADUS_EXPECT_ERROR(layer_norm(zeros({4, 8}), {8}, zeros({4})), ShapeError, "layer_norm",
                      "weight");
}

// ---------------------------------------------------------------------------- dropout
TEST(Dropout, ScalesKeptValuesAndMasksGradients) {
  const uint64_t s = fresh_seed();
  const double p = 0.3;
  Tensor x = random_tensor({200, 500}, s, 0.5, 1.5);
  x.set_requires_grad(true);
  Generator gen(s);
  const Tensor y = dropout(x, p, true, &gen);
  const std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  int64_t dropped = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0.0) {
      ++dropped;
    } else {
      ASSERT_NEAR(yv[i], xv[i] / (1 - p), 1e-12);
    }
  }
  // 100000 Bernoulli draws: the fraction is within 0.01 of p with overwhelming probability.
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(xv.size()), p, 0.01);
  y.sum().backward();
  const std::vector<double> gv = x.grad().to_vector<double>();
  for (size_t i = 0; i < xv.size(); ++i) {
    ASSERT_EQ(gv[i], yv[i] == 0.0 ? 0.0 : 1.0 / (1 - p));
  }
  // The same generator state gives the same mask; a fresh draw gives another.
  Generator again(s);
  EXPECT_EQ(dropout(x.detach(), p, true, &again).to_vector<double>(), yv);
  EXPECT_NE(dropout(x.detach(), p, true, &gen).to_vector<double>(), yv);
}

// Inside a BatchSlice (pipeline micro-batches), dropout of some rows draws what the whole
// batch's dropout draws for those rows, also when the slice starts mid-block (3 values per row:
// rows from 1 start at words 3, 6, 9 ...), and the generator advances by the whole batch's blocks.
TEST(Dropout, RowSlicesDrawWhatTheWholeBatchDraws) {
  const uint64_t s = fresh_seed();
  const Tensor x = random_tensor({7, 3}, s, 0.5, 1.5);
  Generator whole_gen(s);
  const Tensor whole = dropout(x, 0.5, true, &whole_gen);
  for (const auto& [begin, rows] :
       std::vector<std::pair<int64_t, int64_t>>{{0, 7}, {1, 2}, {3, 4}, {6, 1}}) {
    Generator gen(s);
    BatchSliceGuard slice({begin, rows, 7});
    const Tensor part = dropout(x.narrow(0, begin, rows), 0.5, true, &gen);
    EXPECT_EQ(part.to_vector<double>(), whole.narrow(0, begin, rows).to_vector<double>())
        << "rows " << begin << " + " << rows;
    EXPECT_EQ(gen.state().offset, whole_gen.state().offset);
  }
  Generator gen(s);
  BatchSliceGuard slice({0, 2, 7});
  GRADUS_EXPECT_ERROR(dropout(x, 0.5, true, &gen), ValueError, "dropout", "micro-batch of 2");
  EXPECT_THROW(BatchSliceGuard({5, 3, 7}), ValueError);
}

TEST(Dropout, EdgeCases) {
  const Tensor x = random_tensor({4, 5}, fresh_seed());
  EXPECT_TRUE(dropout(x, 0.5, false).same(x));
  EXPECT_TRUE(dropout(x, 0.0, true).same(x));
  EXPECT_TRUE(values_match(dropout(x, 1.0, true), {4, 5}, std::vector<double>(20, 0.0)));
  GRADUS_EXPECT_ERROR(dropout(x, 1.5, true), ValueError, "dropout", "1.5");
  GRADUS_EXPECT_ERROR(dropout(x, -0.1, false), ValueError, "dropout");
}

}  // namespace
}  // namespace gradus
