// Fused NN kernels on CUDA against the CPU backend: GEMM (cuBLASLt: transposes, batches,
// broadcast batches, bias and activation epilogues, beta), conv2d through cuDNN (forward and both
// backwards, strides / padding / dilation / groups), softmax, cross-entropy, layer norm, batch
// norm and pooling, in f32 / f16 / bf16 (f64 where the CPU reference is exact).
#include <cstdlib>

#include "gpu/gpu_test_util.h"

namespace gradus {
namespace {

using namespace gpu_test;
using backend::Activation;
using backend::Conv2dArgs;
using backend::GemmArgs;
using backend::Pool2dArgs;

const DType kTypes[] = {DType::f32, DType::f16, DType::bf16};

// ------------------------------------------------------------------------------------ GEMM
struct GemmCase {
  int64_t batch, m, n, k;
  bool ta, tb;
  bool broadcast_b;
  bool bias;
  Activation act;
  double beta;
};

void run_gemm(const GemmCase& c, DType t) {
  const Shape sa = c.ta ? Shape{c.batch, c.k, c.m} : Shape{c.batch, c.m, c.k};
  const Shape sb = c.tb ? Shape{c.broadcast_b ? 1 : c.batch, c.n, c.k}
                        : Shape{c.broadcast_b ? 1 : c.batch, c.k, c.n};
  const Tensor a = rnd(sa, t), b0 = rnd(sb, t), bias = rnd({c.n}, t),
               init = rnd({c.batch, c.m, c.n}, t);
  const Tensor b =
      c.broadcast_b ? b0.as_strided_raw({c.batch, sb[1], sb[2]}, {0, sb[2], 1}, 0) : b0;
  GemmArgs args;
  args.trans_a = c.ta;
  args.trans_b = c.tb;
  args.beta = c.beta;
  args.alpha = 1.25;
  args.activation = c.act;
  const Tensor expect = init.clone();
  if (c.bias) args.bias = &bias;
  cpu().gemm(a, b, expect, args);
  const Tensor ag = a.to(cuda0()), bg0 = b0.to(cuda0()), biasg = bias.to(cuda0());
  const Tensor bg = c.broadcast_b ? bg0.as_strided_raw(b.sizes(), b.strides(), bg0.offset()) : bg0;
  const Tensor out = init.to(cuda0());
  if (c.bias) args.bias = &biasg;
  gpu().gemm(ag, bg, out, args);
  // f32 without TF32: sums of k products differ in order only. Scale by sqrt(k).
  const double scale = std::sqrt(static_cast<double>(c.k));
  EXPECT_TRUE(close(out, expect, tol(t) * (t == DType::f32 ? scale : 2.0), 2.0))
      << dtype_name(t) << " b" << c.batch << " m" << c.m << " n" << c.n << " k" << c.k << " ta"
      << c.ta << " tb" << c.tb << " act " << static_cast<int>(c.act) << " beta " << c.beta;
}

TEST(CudaGemm, LayoutsEpiloguesAndDtypes) {
  GRADUS_REQUIRE_GPU();
  cuda::set_allow_tf32(false);
  const GemmCase cases[] = {
      {1, 64, 48, 32, false, false, false, false, Activation::none, 0.0},
      {1, 33, 17, 65, true, false, false, true, Activation::none, 0.0},
      {1, 128, 96, 80, false, true, false, true, Activation::relu, 0.0},
      {1, 31, 29, 23, true, true, false, true, Activation::gelu, 0.0},
      {1, 40, 24, 16, false, true, false, true, Activation::gelu_tanh, 0.0},
      {1, 40, 24, 16, false, false, false, false, Activation::relu, 0.5},
      {4, 37, 19, 41, false, false, false, false, Activation::none, 0.0},
      {3, 16, 64, 32, false, true, true, true, Activation::relu, 0.0},
      {2, 5, 7, 1, true, false, false, false, Activation::none, 1.0},
  };
  for (DType t : kTypes) {
    for (const GemmCase& c : cases) run_gemm(c, t);
  }
  for (const GemmCase& c : cases) run_gemm(c, DType::f64);
}

TEST(CudaGemm, Tf32IsCloseButOptional) {
  GRADUS_REQUIRE_GPU();
  const Tensor a = rnd({256, 512}, DType::f32), b = rnd({512, 128}, DType::f32);
  const Tensor exact = matmul(a, b);
  cuda::set_allow_tf32(true);
  const Tensor fast = matmul(a.to(cuda0()), b.to(cuda0()));
  cuda::set_allow_tf32(false);
  EXPECT_TRUE(close(fast, exact, 5e-3, 2.0));  // TF32 has a 10-bit mantissa
}

// ------------------------------------------------------------------------------------ conv2d
struct ConvCase {
  int64_t n, c, h, w, o, kh, kw;
  Conv2dArgs a;
  bool bias;
};

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

TEST(CudaConv, ForwardAndBackwards) {
  GRADUS_REQUIRE_GPU();
  cuda::set_allow_tf32(false);
  const ConvCase cases[] = {
      {2, 3, 16, 16, 8, 3, 3, {1, 1, 1, 1, 1, 1, 1}, true},
      {3, 4, 13, 11, 6, 5, 3, {2, 1, 2, 0, 1, 1, 1}, true},
      {2, 8, 9, 9, 8, 3, 3, {1, 1, 2, 2, 2, 2, 4}, false},
      {1, 6, 12, 12, 6, 3, 3, {1, 1, 1, 1, 1, 1, 6}, true},  // depthwise
      {4, 16, 8, 8, 32, 1, 1, {1, 1, 0, 0, 1, 1, 1}, true},
  };
  // cuDNN, then the im2col + GEMM path (the one builds without cuDNN use).
  for (const char* path : {"0", "1"}) {
    ::setenv("GRADUS_CONV_IM2COL", path, 1);
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      for (const ConvCase& c : cases) {
        const int64_t oh = out_size(c.h, c.kh, c.a.stride_h, c.a.pad_h, c.a.dilation_h);
        const int64_t ow = out_size(c.w, c.kw, c.a.stride_w, c.a.pad_w, c.a.dilation_w);
        const Tensor x = rnd({c.n, c.c, c.h, c.w}, t);
        const Tensor w = rnd({c.o, c.c / c.a.groups, c.kh, c.kw}, t);
        const Tensor bias = c.bias ? rnd({c.o}, t) : Tensor();
        const Tensor gy = rnd({c.n, c.o, oh, ow}, t);
        const double k = std::sqrt(static_cast<double>(c.c / c.a.groups * c.kh * c.kw));
        const double r = t == DType::f32 ? tol(t) * k : (t == DType::f64 ? 1e-10 : tol(t) * 2);
        const std::string what =
            std::string(dtype_name(t)) + " case c=" + std::to_string(c.c) + " im2col=" + path;

        const Tensor ye = poisoned({c.n, c.o, oh, ow}, t, Device::cpu());
        cpu().conv2d(x, w, bias, ye, c.a);
        const Tensor yg = poisoned({c.n, c.o, oh, ow}, t, cuda0());
        gpu().conv2d(x.to(cuda0()), w.to(cuda0()), c.bias ? bias.to(cuda0()) : Tensor(), yg, c.a);
        EXPECT_TRUE(close(yg, ye, r, 2.0)) << "forward " << what;

        const Tensor gxe = poisoned(x.sizes(), t, Device::cpu());
        cpu().conv2d_backward_data(gy, w, gxe, c.a);
        const Tensor gxg = poisoned(x.sizes(), t, cuda0());
        gpu().conv2d_backward_data(gy.to(cuda0()), w.to(cuda0()), gxg, c.a);
        EXPECT_TRUE(close(gxg, gxe, r, 2.0)) << "backward data " << what;

        const Tensor gwe = poisoned(w.sizes(), t, Device::cpu());
        const Tensor gbe = c.bias ? poisoned({c.o}, t, Device::cpu()) : Tensor();
        cpu().conv2d_backward_weight(gy, x, gwe, gbe, c.a);
        const Tensor gwg = poisoned(w.sizes(), t, cuda0());
        const Tensor gbg = c.bias ? poisoned({c.o}, t, cuda0()) : Tensor();
        gpu().conv2d_backward_weight(gy.to(cuda0()), x.to(cuda0()), gwg, gbg, c.a);
        const double rw = r * std::sqrt(static_cast<double>(c.n * oh * ow)) / k;
        EXPECT_TRUE(close(gwg, gwe, std::max(rw, r), 2.0)) << "backward weight " << what;
        if (c.bias) {
          EXPECT_TRUE(close(gbg, gbe, std::max(rw, r), 2.0)) << "bias grad " << what;
        }
      }
    }
  }
  ::unsetenv("GRADUS_CONV_IM2COL");
}

// ------------------------------------------------------------------------------------ softmax / CE
TEST(CudaSoftmax, ForwardBackwardWarpAndBlockRows) {
  GRADUS_REQUIRE_GPU();
  for (DType t : kTypes) {
    for (Shape s : {Shape{67, 10}, Shape{33, 1000}, Shape{5, 50257}, Shape{3, 7, 129}}) {
      for (bool log : {false, true}) {
        const Tensor x = rnd(s, t, -4, 4), g = rnd(s, t);
        const Tensor ye = poisoned(s, t, Device::cpu());
        cpu().softmax(x, ye, log);
        const Tensor yg = poisoned(s, t, cuda0());
        gpu().softmax(x.to(cuda0()), yg, log);
        EXPECT_TRUE(close(yg, ye, tol(t) * 2)) << dtype_name(t) << shape_str(s) << " log " << log;
        const Tensor ge = poisoned(s, t, Device::cpu());
        cpu().softmax_backward(g, ye, ge, log);
        const Tensor gg = poisoned(s, t, cuda0());
        gpu().softmax_backward(g.to(cuda0()), ye.to(cuda0()), gg, log);
        EXPECT_TRUE(close(gg, ge, tol(t) * 4)) << "backward " << dtype_name(t) << shape_str(s);
      }
    }
  }
}

TEST(CudaCrossEntropy, WeightsSmoothingIgnoreIndex) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f64, DType::bf16}) {
    for (int64_t c : {int64_t{10}, int64_t{1000}, int64_t{3001}}) {
      const int64_t n = 67;
      const Tensor logits = rnd({n, c}, t, -3, 3);
      Tensor target = rnd_int({n}, DType::i64, 0, c);
      std::vector<int64_t> tv = target.to_vector<int64_t>();
      tv[3] = -100;
      tv[40] = -100;
      target = from_vector(tv, {n}, {DType::i64});
      const Tensor weight = rnd({c}, t, 0.5, 2.0);
      const DType lt = t == DType::f64 ? DType::f64 : DType::f32;
      for (bool use_w : {false, true}) {
        for (double ls : {0.0, 0.1}) {
          const Tensor w = use_w ? weight : Tensor();
          const Tensor le = poisoned({n}, lt, Device::cpu()), se = poisoned({n}, lt, Device::cpu());
          cpu().cross_entropy(logits, target, w, -100, ls, le, se);
          const Tensor lg = poisoned({n}, lt, cuda0()), sg = poisoned({n}, lt, cuda0());
          const Tensor wg = use_w ? weight.to(cuda0()) : Tensor();
          gpu().cross_entropy(logits.to(cuda0()), target.to(cuda0()), wg, -100, ls, lg, sg);
          const std::string what = std::string(dtype_name(t)) + " C=" + std::to_string(c) +
                                   " w=" + std::to_string(use_w) + " ls=" + std::to_string(ls);
          EXPECT_TRUE(close(lg, le, 1e-5 * 4)) << "loss " << what;
          EXPECT_TRUE(close(sg, se, 1e-5 * 4)) << "lse " << what;
          // Backward with a broadcast upstream gradient (as from a mean reduction).
          const Tensor gl = full({1}, 1.0 / n, {lt});
          const Tensor gle = gl.as_strided_raw({n}, {0}, 0);
          const Tensor gxe = poisoned({n, c}, t, Device::cpu());
          cpu().cross_entropy_backward(gle, logits, target, w, -100, ls, se, gxe);
          const Tensor glg = gl.to(cuda0());
          const Tensor gxg = poisoned({n, c}, t, cuda0());
          gpu().cross_entropy_backward(glg.as_strided_raw({n}, {0}, glg.offset()),
                                       logits.to(cuda0()), target.to(cuda0()), wg, -100, ls,
                                       se.to(cuda0()), gxg);
          EXPECT_TRUE(close(gxg, gxe, tol(t) * 4)) << "grad " << what;
        }
      }
    }
  }
}

// ------------------------------------------------------------------------------------ norms
TEST(CudaLayerNorm, ForwardBackward) {
  GRADUS_REQUIRE_GPU();
  for (DType t : kTypes) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{64, 768}, {7, 4099}, {3000, 33}}) {
      const Tensor x = rnd({rows, cols}, t, -2, 3), w = rnd({cols}, t), b = rnd({cols}, t);
      const Tensor g = rnd({rows, cols}, t);
      const Tensor ye = poisoned({rows, cols}, t, Device::cpu());
      const Tensor me = poisoned({rows}, DType::f32, Device::cpu());
      const Tensor re = poisoned({rows}, DType::f32, Device::cpu());
      cpu().layer_norm(x, w, b, 1e-5, ye, me, re);
      const Tensor yg = poisoned({rows, cols}, t, cuda0());
      const Tensor mg = poisoned({rows}, DType::f32, cuda0()),
                   rg = poisoned({rows}, DType::f32, cuda0());
      gpu().layer_norm(x.to(cuda0()), w.to(cuda0()), b.to(cuda0()), 1e-5, yg, mg, rg);
      const std::string what =
          std::string(dtype_name(t)) + " " + std::to_string(rows) + "x" + std::to_string(cols);
      EXPECT_TRUE(close(yg, ye, tol(t) * 4)) << "out " << what;
      EXPECT_TRUE(close(mg, me, 1e-5)) << "mean " << what;
      EXPECT_TRUE(close(rg, re, 1e-5)) << "rstd " << what;
      const Tensor gxe = poisoned({rows, cols}, t, Device::cpu());
      const Tensor gwe = poisoned({cols}, t, Device::cpu()),
                   gbe = poisoned({cols}, t, Device::cpu());
      cpu().layer_norm_backward(g, x, w, me, re, gxe, gwe, gbe);
      const Tensor gxg = poisoned({rows, cols}, t, cuda0());
      const Tensor gwg = poisoned({cols}, t, cuda0()), gbg = poisoned({cols}, t, cuda0());
      gpu().layer_norm_backward(g.to(cuda0()), x.to(cuda0()), w.to(cuda0()), me.to(cuda0()),
                                re.to(cuda0()), gxg, gwg, gbg);
      EXPECT_TRUE(close(gxg, gxe, tol(t) * 8)) << "grad x " << what;
      EXPECT_TRUE(close(gwg, gwe, tol(t) * 8)) << "grad w " << what;
      EXPECT_TRUE(close(gbg, gbe, tol(t) * 8)) << "grad b " << what;
    }
  }
}

TEST(CudaBatchNorm, TrainEvalBackward) {
  GRADUS_REQUIRE_GPU();
  for (DType t : kTypes) {
    for (Shape s : {Shape{8, 16, 5, 7}, Shape{256, 64}, Shape{2, 3, 33, 31}}) {
      const int64_t c = s[1];
      const Tensor x = rnd(s, t, -1, 2), w = rnd({c}, t), b = rnd({c}, t), g = rnd(s, t);
      const Tensor rm0 = rnd({c}, DType::f32), rv0 = rnd({c}, DType::f32, 0.5, 1.5);
      const std::string what = std::string(dtype_name(t)) + shape_str(s);
      for (bool training : {true, false}) {
        const Tensor rme = rm0.clone(), rve = rv0.clone();
        const Tensor ye = poisoned(s, t, Device::cpu());
        const Tensor sme = poisoned({c}, DType::f32, Device::cpu());
        const Tensor sre = poisoned({c}, DType::f32, Device::cpu());
        cpu().batch_norm(x, w, b, rme, rve, training, 0.1, 1e-5, ye, sme, sre);
        const Tensor rmg = rm0.to(cuda0()), rvg = rv0.to(cuda0());
        const Tensor yg = poisoned(s, t, cuda0());
        const Tensor smg = poisoned({c}, DType::f32, cuda0()),
                     srg = poisoned({c}, DType::f32, cuda0());
        gpu().batch_norm(x.to(cuda0()), w.to(cuda0()), b.to(cuda0()), rmg, rvg, training, 0.1, 1e-5,
                         yg, smg, srg);
        EXPECT_TRUE(close(yg, ye, tol(t) * 4)) << "out " << what << " training " << training;
        EXPECT_TRUE(close(rmg, rme, 1e-5)) << "running mean " << what;
        EXPECT_TRUE(close(rvg, rve, 1e-5)) << "running var " << what;
        if (!training) continue;
        EXPECT_TRUE(close(smg, sme, 1e-5)) << "save mean " << what;
        EXPECT_TRUE(close(srg, sre, 1e-5)) << "save rstd " << what;
        const Tensor gxe = poisoned(s, t, Device::cpu());
        const Tensor gwe = poisoned({c}, t, Device::cpu()), gbe = poisoned({c}, t, Device::cpu());
        cpu().batch_norm_backward(g, x, w, sme, sre, gxe, gwe, gbe);
        const Tensor gxg = poisoned(s, t, cuda0());
        const Tensor gwg = poisoned({c}, t, cuda0()), gbg = poisoned({c}, t, cuda0());
        gpu().batch_norm_backward(g.to(cuda0()), x.to(cuda0()), w.to(cuda0()), sme.to(cuda0()),
                                  sre.to(cuda0()), gxg, gwg, gbg);
        EXPECT_TRUE(close(gxg, gxe, tol(t) * 8)) << "grad x " << what;
        EXPECT_TRUE(close(gwg, gwe, tol(t) * 8)) << "grad w " << what;
        EXPECT_TRUE(close(gbg, gbe, tol(t) * 8)) << "grad b " << what;
      }
    }
  }
}

// ------------------------------------------------------------------------------------ pooling
int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;  // the last window must start inside
  return o;
}

TEST(CudaPool, MaxAvgAdaptiveForwardBackward) {
  GRADUS_REQUIRE_GPU();
  struct Case {
    Shape s;
    Pool2dArgs a;
  };
  Pool2dArgs p2;
  p2.kernel_h = p2.kernel_w = 2;
  p2.stride_h = p2.stride_w = 2;
  Pool2dArgs p3 = p2;
  p3.kernel_h = p3.kernel_w = 3;
  p3.pad_h = p3.pad_w = 1;
  p3.ceil_mode = true;
  p3.count_include_pad = false;
  Pool2dArgs pd = p3;
  pd.dilation_h = pd.dilation_w = 2;
  pd.ceil_mode = false;
  pd.stride_h = 1;
  pd.count_include_pad = true;
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    for (const Case& c : {Case{{4, 8, 16, 16}, p2}, Case{{2, 3, 17, 15}, p3},
                          Case{{2, 5, 14, 13}, pd}, Case{{6, 11, 10}, p2}}) {
      const int64_t d = static_cast<int64_t>(c.s.size());
      const int64_t h = c.s[d - 2], w = c.s[d - 1];
      const bool dilated = c.a.dilation_h > 1;
      Shape os = c.s;
      os[d - 2] = pool_out(h, c.a.kernel_h, c.a.stride_h, c.a.pad_h, c.a.dilation_h, c.a.ceil_mode);
      os[d - 1] = pool_out(w, c.a.kernel_w, c.a.stride_w, c.a.pad_w, c.a.dilation_w, c.a.ceil_mode);
      const Tensor x = t == DType::f32 ? rnd_int(c.s, t, -20, 20) : rnd(c.s, t);  // ties in f32
      const Tensor gy = rnd(os, t);
      const std::string what = std::string(dtype_name(t)) + shape_str(c.s);
      // max
      const Tensor ye = poisoned(os, t, Device::cpu());
      const Tensor ie = empty(os, {DType::i64});
      cpu().max_pool2d(x, ye, ie, c.a);
      const Tensor yg = poisoned(os, t, cuda0());
      const Tensor ig = empty(os, {DType::i64, cuda0()});
      gpu().max_pool2d(x.to(cuda0()), yg, ig, c.a);
      EXPECT_TRUE(identical(yg, ye)) << "max " << what;
      EXPECT_TRUE(identical(ig, ie)) << "argmax " << what;
      const Tensor gxe = poisoned(c.s, t, Device::cpu());
      cpu().max_pool2d_backward(gy, ie, gxe);
      const Tensor gxg = poisoned(c.s, t, cuda0());
      gpu().max_pool2d_backward(gy.to(cuda0()), ig, gxg);
      EXPECT_TRUE(close(gxg, gxe, tol(t) * 2)) << "max backward " << what;
      if (dilated) continue;  // avg pool has no dilation
      // avg
      const Tensor ae = poisoned(os, t, Device::cpu());
      cpu().avg_pool2d(x, ae, c.a);
      const Tensor ag = poisoned(os, t, cuda0());
      gpu().avg_pool2d(x.to(cuda0()), ag, c.a);
      EXPECT_TRUE(close(ag, ae, tol(t) * 2)) << "avg " << what;
      const Tensor gae = poisoned(c.s, t, Device::cpu());
      cpu().avg_pool2d_backward(gy, gae, c.a);
      const Tensor gag = poisoned(c.s, t, cuda0());
      gpu().avg_pool2d_backward(gy.to(cuda0()), gag, c.a);
      EXPECT_TRUE(close(gag, gae, tol(t) * 2)) << "avg backward " << what;
    }
    // adaptive, including output larger than input (overlapping bins)
    for (auto [in, out] : {std::pair<Shape, Shape>{{2, 3, 17, 13}, {2, 3, 5, 4}},
                           {{2, 3, 4, 6}, {2, 3, 7, 9}},
                           {{1, 2, 9, 9}, {1, 2, 1, 1}}}) {
      const Tensor x = rnd(in, t), gy = rnd(out, t);
      const Tensor ye = poisoned(out, t, Device::cpu());
      cpu().adaptive_avg_pool2d(x, ye);
      const Tensor yg = poisoned(out, t, cuda0());
      gpu().adaptive_avg_pool2d(x.to(cuda0()), yg);
      EXPECT_TRUE(close(yg, ye, tol(t) * 2)) << "adaptive " << shape_str(in);
      const Tensor ge = poisoned(in, t, Device::cpu());
      cpu().adaptive_avg_pool2d_backward(gy, ge);
      const Tensor gg = poisoned(in, t, cuda0());
      gpu().adaptive_avg_pool2d_backward(gy.to(cuda0()), gg);
      EXPECT_TRUE(close(gg, ge, tol(t) * 2)) << "adaptive backward " << shape_str(in);
    }
  }
}

}  // namespace
}  // namespace gradus
