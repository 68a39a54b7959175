// Indexing (embedding rows, gather / scatter_add) and the fused multi-tensor optimizers on CUDA
// against the CPU backend.
#include "gpu/gpu_test_util.h"

namespace gradus {
namespace {

using namespace gpu_test;

TEST(CudaIndexing, SelectAndAddRows) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::i64}) {
    for (int64_t d : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{771}}) {
      const int64_t vocab = 97, n = 1003;
      const Tensor table = is_floating(t) ? rnd({vocab, d}, t) : rnd_int({vocab, d}, t, -9, 9);
      const Tensor index = rnd_int({n}, DType::i64, 0, vocab);  // many repeats
      const Tensor oe = poisoned({n, d}, t, Device::cpu());
      cpu().index_select_rows(table, index, oe);
      const Tensor og = poisoned({n, d}, t, cuda0());
      gpu().index_select_rows(table.to(cuda0()), index.to(cuda0()), og);
      EXPECT_TRUE(identical(og, oe)) << "select " << dtype_name(t) << " d " << d;

      const Tensor g = is_floating(t) ? rnd({n, d}, t) : rnd_int({n, d}, t, -9, 9);
      const Tensor te = zeros({vocab, d}, {t});
      cpu().index_add_rows(g, index, te);
      const Tensor tg = zeros({vocab, d}, {t, cuda0()});
      gpu().index_add_rows(g.to(cuda0()), index.to(cuda0()), tg);
      // Atomic accumulation order differs: ~n / vocab additions per element.
      EXPECT_TRUE(is_floating(t) ? close(tg, te, tol(t) * 8, 4.0) : identical(tg, te))
          << "add " << dtype_name(t) << " d " << d;
    }
  }
}

// An embedding table without rows: every index is out of range, reported as the CPU reports it
// (an IndexError naming the op), never a division by zero on the host.
TEST(CudaIndexing, EmbeddingOfATableWithoutRowsIsAnIndexError) {
  GRADUS_REQUIRE_GPU();
  for (const Device& device : {Device::cpu(), cuda0()}) {
    SCOPED_TRACE(device.str());
    const Tensor table = empty({0, 4}, {DType::f32, device});
    const Tensor index = zeros({3}, {DType::i64, device});
    EXPECT_THROW((void)embedding(table, index).cpu(), IndexError);
    // An empty index on the same table is an empty result.
    const Tensor none = embedding(table, empty({0}, {DType::i64, device}));
    EXPECT_EQ(none.sizes(), (Shape{0, 4}));
  }
}

TEST(CudaIndexing, GatherScatterAdd) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::u8}) {
    for (int64_t dim : {0, 1, 2}) {
      const Shape xs = {9, 11, 13};
      Shape is = {7, 10, 12};
      const int64_t extent = xs[static_cast<size_t>(dim)];
      const Tensor x = is_floating(t) ? rnd(xs, t) : rnd_int(xs, t, 0, 9);
      const Tensor index = rnd_int(is, DType::i64, 0, extent);
      const Tensor ge = poisoned(is, t, Device::cpu());
      cpu().gather(x, dim, index, ge);
      const Tensor gg = poisoned(is, t, cuda0());
      gpu().gather(strided_copy(x, cuda0()), dim, index.to(cuda0()), gg);
      EXPECT_TRUE(identical(gg, ge)) << "gather " << dtype_name(t) << " dim " << dim;

      const Tensor src = is_floating(t) ? rnd(is, t) : rnd_int(is, t, 0, 3);
      const Tensor se = x.clone();
      cpu().scatter_add(se, dim, index, src);
      const Tensor sg = x.to(cuda0());
      gpu().scatter_add(sg, dim, index.to(cuda0()), src.to(cuda0()));
      EXPECT_TRUE(is_floating(t) ? close(sg, se, tol(t) * 8, 4.0) : identical(sg, se))
          << "scatter_add " << dtype_name(t) << " dim " << dim;
    }
  }
}

// Parameters of many sizes (several launches of the multi-tensor kernels, chunks that end
// mid-block).
std::vector<Shape> param_shapes() {
  std::vector<Shape> shapes;
  for (int i = 0; i < 60; ++i) shapes.push_back({1 + (i * 37) % 101, 1 + (i * 13) % 7});
  shapes.push_back({300, 1000});  // several chunks
  shapes.push_back({1});
  return shapes;
}

std::vector<Tensor> on(const std::vector<Tensor>& v, Device d) {
  std::vector<Tensor> out;
  for (const Tensor& t : v) out.push_back(t.to(d).clone());
  return out;
}

TEST(CudaOptim, SgdVariants) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f64}) {
    std::vector<Tensor> p, g, b;
    for (const Shape& s : param_shapes()) {
      p.push_back(rnd(s, t));
      g.push_back(rnd(s, t));
      b.push_back(rnd(s, t));
    }
    backend::SgdArgs variants[4];
    variants[0].lr = 0.1;
    variants[1] = {0.05, 0.9, 0.0, 1e-2, true, false, false};
    variants[2] = {0.05, 0.9, 0.1, 0.0, false, true, true};
    variants[3] = {0.01, 0.5, 0.0, 0.0, false, false, false};
    for (const backend::SgdArgs& a : variants) {
      std::vector<Tensor> pc = on(p, Device::cpu()), bc = on(b, Device::cpu());
      std::vector<Tensor> pg = on(p, cuda0()), bg = on(b, cuda0()), gg = on(g, cuda0());
      cpu().sgd_step(pc, g, a.momentum != 0 ? bc : std::vector<Tensor>{}, a);
      gpu().sgd_step(pg, gg, a.momentum != 0 ? bg : std::vector<Tensor>{}, a);
      for (size_t i = 0; i < p.size(); ++i) {
        EXPECT_TRUE(close(pg[i], pc[i], 1e-6)) << "param " << i << " " << dtype_name(t);
        if (a.momentum != 0) {
          EXPECT_TRUE(close(bg[i], bc[i], 1e-6)) << "buffer " << i;
        }
      }
    }
  }
}

TEST(CudaOptim, AdamAndAdamW) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f64}) {
    for (bool decoupled : {false, true}) {
      for (bool amsgrad : {false, true}) {
        std::vector<Tensor> p, g, m, v, vmax;
        for (const Shape& s : param_shapes()) {
          p.push_back(rnd(s, t));
          g.push_back(rnd(s, t));
          m.push_back(rnd(s, t, -0.1, 0.1));
          v.push_back(rnd(s, t, 0.0, 0.01));
          vmax.push_back(rnd(s, t, 0.0, 0.01));
        }
        backend::AdamArgs a;
        a.lr = 1e-3;
        a.weight_decay = 0.01;
        a.decoupled_weight_decay = decoupled;
        a.amsgrad = amsgrad;
        a.step = 3;
        std::vector<Tensor> pc = on(p, Device::cpu()), mc = on(m, Device::cpu()),
                            vc = on(v, Device::cpu()), xc = on(vmax, Device::cpu());
        std::vector<Tensor> pg = on(p, cuda0()), mg = on(m, cuda0()), vg = on(v, cuda0()),
                            xg = on(vmax, cuda0()), gg = on(g, cuda0());
        cpu().adam_step(pc, g, mc, vc, amsgrad ? xc : std::vector<Tensor>{}, a);
        gpu().adam_step(pg, gg, mg, vg, amsgrad ? xg : std::vector<Tensor>{}, a);
        for (size_t i = 0; i < p.size(); ++i) {
          EXPECT_TRUE(close(pg[i], pc[i], 1e-6))
              << "param " << i << " decoupled " << decoupled << " amsgrad " << amsgrad;
          EXPECT_TRUE(close(mg[i], mc[i], 1e-6));
          EXPECT_TRUE(close(vg[i], vc[i], 1e-6));
        }
      }
    }
  }
}

// amp's unscale_and_check on CUDA against the CPU backend: the same products in every float dtype
// (several tensors, chunks of one launch and several launches), and the inf/NaN flag.
TEST(CudaAmp, UnscaleAndCheckMatchesTheCpu) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (int planted = -1; planted < 3; ++planted) {
      std::vector<Tensor> c, g;
      for (int64_t n : {int64_t{1}, int64_t{4097}, int64_t{70001}}) c.push_back(rnd({n}, t, -4, 4));
      if (planted >= 0) {
        // An inf (or NaN) in one tensor: every tensor is still scaled, the flag is raised.
        Tensor host = c[static_cast<size_t>(planted)].to(DType::f64);
        static_cast<double*>(host.raw_data())[0] = planted == 1 ? std::nan("") : HUGE_VAL;
        c[static_cast<size_t>(planted)] = host.to(t);
      }
      for (const Tensor& x : c) g.push_back(x.to(cuda0()));
      Tensor fc = zeros({1}, {DType::f32});
      Tensor fg = zeros({1}, {DType::f32, cuda0()});
      cpu().unscale_and_check(c, 1.0 / 1024.0, fc);
      gpu().unscale_and_check(g, 1.0 / 1024.0, fg);
      for (size_t i = 0; i < c.size(); ++i) {
        EXPECT_TRUE(identical(g[i], c[i])) << dtype_name(t) << " tensor " << i;
      }
      EXPECT_EQ(fg.to(Device::cpu()).item(), planted >= 0 ? 1.0 : 0.0) << dtype_name(t);
      EXPECT_EQ(fc.item(), planted >= 0 ? 1.0 : 0.0);
    }
  }
}

}  // namespace
}  // namespace gradus
