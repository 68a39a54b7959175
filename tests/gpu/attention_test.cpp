// The two CUDA attention paths (src/backend/cuda/attention.cpp) against each other and the CPU:
// the materialised one (cuBLASLt scores, row softmax) and the streaming kernel it falls back to
// when gradus::cuda::attention_scores_limit() is too small for the scores. (tests/ops'
// FusedAttention checks the default path against float64 on every device.)
#include "gpu/gpu_test_util.h"

namespace gradus {
namespace {

using namespace gpu_test;

struct Result {
  Tensor out, gq, gk, gv;
};

Result attend(const Tensor& q0, const Tensor& k0, const Tensor& v0, const Tensor& w, Device device,
              bool causal, double dropout, uint64_t drop_seed) {
  Tensor q = q0.to(device).detach().set_requires_grad();
  Tensor k = k0.to(device).detach().set_requires_grad();
  Tensor v = v0.to(device).detach().set_requires_grad();
  Generator gen(drop_seed);
  AttentionOptions o;
  o.causal = causal;
  o.dropout_p = dropout;
  o.generator = &gen;
  Tensor out = scaled_dot_product_attention(q, k, v, o);
  sum(mul(out, w.to(device))).backward();
  return {out, q.grad(), k.grad(), v.grad()};
}

// Restores the default limit whatever the test does.
struct LimitGuard {
  size_t saved = cuda::attention_scores_limit();
  ~LimitGuard() { cuda::set_attention_scores_limit(saved); }
};

TEST(CudaAttention, MaterialisedAndStreamingPathsAgreeWithTheCpu) {
  GRADUS_REQUIRE_GPU();
  cuda::set_allow_tf32(false);
  const LimitGuard guard;
  const uint64_t seed = testing::fresh_seed();
  for (const DType t : {DType::f32, DType::bf16}) {
    for (const bool causal : {true, false}) {
      for (const double dropout : {0.0, 0.2}) {
        const Tensor q = rnd({2, 3, 130, 40}, t, -2, 2), k = rnd({2, 3, 97, 40}, t, -2, 2),
                     v = rnd({2, 3, 97, 24}, t), w = rnd({2, 3, 130, 24}, t);
        const Result cpu_r = attend(q, k, v, w, Device::cpu(), causal, dropout, seed);
        cuda::set_attention_scores_limit(size_t{1} << 30);
        const Result mat = attend(q, k, v, w, cuda0(), causal, dropout, seed);
        cuda::set_attention_scores_limit(0);
        const Result str = attend(q, k, v, w, cuda0(), causal, dropout, seed);
        const double tol = t == DType::f32 ? 2e-5 : 3e-2;
        for (const Result* r : {&mat, &str}) {
          const char* path = r == &mat ? "materialised" : "streaming";
          EXPECT_TRUE(close(r->out, cpu_r.out, tol)) << path << " out " << dtype_name(t);
          EXPECT_TRUE(close(r->gq, cpu_r.gq, 4 * tol)) << path << " grad q " << dtype_name(t);
          EXPECT_TRUE(close(r->gk, cpu_r.gk, 4 * tol)) << path << " grad k " << dtype_name(t);
          EXPECT_TRUE(close(r->gv, cpu_r.gv, 4 * tol)) << path << " grad v " << dtype_name(t);
        }
      }
    }
  }
}

TEST(CudaAttention, HeadsWiderThanTheStreamingKernelsNeedTheMaterialisedPath) {
  GRADUS_REQUIRE_GPU();
  cuda::set_allow_tf32(false);
  const LimitGuard guard;
  const Tensor q = rnd({1, 2, 33, 320}, DType::f32), k = rnd({1, 2, 33, 320}, DType::f32),
               v = rnd({1, 2, 33, 300}, DType::f32), w = rnd({1, 2, 33, 300}, DType::f32);
  const Result cpu_r = attend(q, k, v, w, Device::cpu(), true, 0.0, 1);
  const Result gpu_r = attend(q, k, v, w, cuda0(), true, 0.0, 1);
  EXPECT_TRUE(close(gpu_r.out, cpu_r.out, 2e-5));
  EXPECT_TRUE(close(gpu_r.gq, cpu_r.gq, 1e-4));
  cuda::set_attention_scores_limit(0);
  try {
    attend(q, k, v, w, cuda0(), true, 0.0, 1);
    FAIL() << "a 320-wide head streamed";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("set_attention_scores_limit"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gradus
