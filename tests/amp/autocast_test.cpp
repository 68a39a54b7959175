// amp::Autocast: each category of the policy table runs in its documented dtype (docs/amp.md),
// float32 parameters receive float32 gradients close to a float64 reference, a parameter is cast
// once per scope, backward ignores an enclosing scope, and checkpointing recomputes in the
// forward's autocast state.
#include <gtest/gtest.h>

#include <thread>

#include "gradus/amp/amp.h"
#include "gradus/nn/nn.h"
#include "support/test_util.h"

namespace gradus::testing {
namespace {

class AutocastDTypes : public ::testing::TestWithParam<DType> {};

Tensor rnd(const Shape& shape, DType dtype = DType::f32, bool requires_grad = false) {
  Tensor t = random_tensor(shape, fresh_seed(), -1.0, 1.0, dtype);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

TEST_P(AutocastDTypes, TensorCoreOpsRunInTheLowPrecisionDType) {
  const DType low = GetParam();
  const Tensor x = rnd({4, 8}), w = rnd({6, 8}), b = rnd({6});
  const Tensor img = rnd({2, 3, 5, 5}), k = rnd({4, 3, 3, 3});
  amp::Autocast autocast(low);
  EXPECT_EQ(linear(x, w, b).dtype(), low);
  EXPECT_EQ(matmul(x, w.t()).dtype(), low);
  EXPECT_EQ(mm(x, w.t()).dtype(), low);
  EXPECT_EQ(bmm(rnd({2, 3, 4}), rnd({2, 4, 5})).dtype(), low);
  EXPECT_EQ(conv2d(img, k, Tensor(), {}).dtype(), low);
  // The values are the float32 ones rounded: 16-bit operands, float32 accumulation.
  const Tensor ref =
      linear(x.to(low).to(DType::f64), w.to(low).to(DType::f64), b.to(low).to(DType::f64));
  EXPECT_TRUE(
      all_close(linear(x, w, b).to(DType::f64), ref, low == DType::bf16 ? 8e-3 : 1e-3, 1e-3));
}

TEST_P(AutocastDTypes, SensitiveOpsRunInFloat32) {
  const DType low = GetParam();
  const Tensor h = rnd({4, 10}, low);
  const Tensor target = randint(0, 10, {4}, {.dtype = DType::i64});
  amp::Autocast autocast(low);
  for (const auto& [name, out] : std::vector<std::pair<std::string, Tensor>>{
           {"softmax", softmax(h, 1)},
           {"log_softmax", log_softmax(h, 1)},
           {"cross_entropy", cross_entropy(h, target)},
           {"mse_loss", mse_loss(h, rnd({4, 10}, low))},
           {"exp", exp(h)},
           {"log", log(abs(h))},
           {"pow", pow(h, 3.0)},
           {"sum", sum(h)},
           {"mean", mean(h, {1})},
           {"var", var(h, {1})},
           {"logsumexp", logsumexp(h, {1})},
           {"norm", norm(h)},
           {"layer_norm", layer_norm(h, {10}, Tensor(), Tensor())},
           {"batch_norm", batch_norm(h, Tensor(), Tensor(), Tensor(), Tensor(), true)}}) {
    EXPECT_EQ(out.dtype(), DType::f32) << name;
    EXPECT_EQ(amp::autocast_policy(name), amp::CastPolicy::float32) << name;
  }
  // The float32 result is the op on the (exactly widened) 16-bit values.
  EXPECT_TRUE(all_close(softmax(h, 1), softmax(h.to(DType::f32), 1), 0, 0));
}

TEST_P(AutocastDTypes, OtherOpsKeepTheirInputsDTypeAndMixedInputsPromote) {
  const DType low = GetParam();
  const Tensor h = rnd({4, 6}, low), f = rnd({4, 6});
  amp::Autocast autocast(low);
  EXPECT_EQ(relu(h).dtype(), low);
  EXPECT_EQ(gelu(h).dtype(), low);
  EXPECT_EQ(max_pool2d(rnd({1, 2, 4, 4}, low), {}).dtype(), low);
  EXPECT_EQ(relu(f).dtype(), DType::f32);  // not cast down either
  EXPECT_EQ(add(h, f).dtype(), DType::f32);
  EXPECT_EQ(mul(h, f).dtype(), DType::f32);
  EXPECT_EQ(cat({h, f}, 0).dtype(), DType::f32);
  EXPECT_EQ(amp::autocast_policy("relu"), amp::CastPolicy::none);
  EXPECT_EQ(amp::autocast_policy("linear"), amp::CastPolicy::lower);
}

TEST_P(AutocastDTypes, Float64IsNeverCast) {
  amp::Autocast autocast(GetParam());
  EXPECT_EQ(linear(rnd({2, 3}, DType::f64), rnd({4, 3}, DType::f64)).dtype(), DType::f64);
  EXPECT_EQ(softmax(rnd({2, 3}, DType::f64), 1).dtype(), DType::f64);
}

TEST_P(AutocastDTypes, FloatParametersGetFloatGradientsCloseToFloat64) {
  const DType low = GetParam();
  const uint64_t seed = fresh_seed();
  const Tensor x = random_tensor({16, 12}, seed, -1, 1, DType::f32);
  const Tensor y = randint(0, 5, {16}, {.dtype = DType::i64});
  manual_seed(seed);
  // tanh, not ReLU: a hidden pre-activation within 16-bit rounding of zero would switch a ReLU
  // off on one side and on on the other, and its whole gradient row with it (69 of 3,000 seeds
  // under float16); a smooth activation leaves only the rounding this test bounds.
  nn::MLP net({12, 32, 5}, "tanh");
  nn::MLP ref({12, 32, 5}, "tanh");
  ref.load_state_dict(net.state_dict());
  ref.to(DType::f64);
  {
    amp::Autocast autocast(low);
    Tensor loss = cross_entropy(net(x), y);
    EXPECT_EQ(loss.dtype(), DType::f32);
    loss.backward();
  }
  cross_entropy(ref(x.to(DType::f64)), y).backward();
  const auto got = net.named_parameters(), want = ref.named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const Tensor& g = got[i].second.grad();
    ASSERT_TRUE(g.defined()) << got[i].first;
    EXPECT_EQ(g.dtype(), DType::f32) << got[i].first;
    EXPECT_TRUE(
        all_close(g.to(DType::f64), want[i].second.grad(), 0.05, low == DType::bf16 ? 2e-2 : 4e-3))
        << got[i].first << " seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Amp, AutocastDTypes, ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Autocast, ScopesNestTurnOffAndRestore) {
  const Tensor x = rnd({2, 3}), w = rnd({4, 3});
  EXPECT_FALSE(amp::is_autocast_enabled());
  {
    amp::Autocast outer(DType::bf16);
    EXPECT_EQ(linear(x, w).dtype(), DType::bf16);
    {
      amp::Autocast off(DType::bf16, false);
      EXPECT_FALSE(amp::is_autocast_enabled());
      EXPECT_EQ(linear(x, w).dtype(), DType::f32);
      {
        amp::Autocast inner(DType::f16);
        EXPECT_EQ(linear(x, w).dtype(), DType::f16);
      }
      EXPECT_EQ(linear(x, w).dtype(), DType::f32);
    }
    EXPECT_EQ(amp::autocast_dtype(), DType::bf16);
    EXPECT_EQ(linear(x, w).dtype(), DType::bf16);
  }
  EXPECT_FALSE(amp::is_autocast_enabled());
  EXPECT_EQ(linear(x, w).dtype(), DType::f32);
}

TEST(Autocast, OnlySixteenBitTargetsAreAccepted) {
  EXPECT_THROW(amp::Autocast(DType::f32), DTypeError);
  EXPECT_THROW(amp::Autocast(DType::i64), DTypeError);
  EXPECT_FALSE(amp::is_autocast_enabled());
}

TEST(Autocast, TheScopeBelongsToItsThread) {
  amp::Autocast autocast(DType::bf16);
  DType seen = DType::bf16;
  std::thread other([&] { seen = linear(rnd({2, 3}), rnd({4, 3})).dtype(); });
  other.join();
  EXPECT_EQ(seen, DType::f32);
}

TEST(Autocast, AParameterIsCastOncePerScopeAndAgainAfterAnInPlaceChange) {
  Tensor w = rnd({4, 3}, DType::f32, true);
  const Tensor x = rnd({2, 3});
  {
    amp::Autocast autocast(DType::bf16);
    const Tensor a = linear(x, w), b = linear(x, w);  // e.g. tied weights
    EXPECT_EQ(amp::autocast_cache_size(), 1u);
    EXPECT_TRUE(all_close(a, b, 0, 0));
    {
      NoGradGuard no_grad;
      w.mul_(2.0);  // an optimizer step inside the scope
    }
    const Tensor c = linear(x, w);
    EXPECT_TRUE(all_close(c.to(DType::f64), mul(a, 2.0).to(DType::f64), 1e-2, 1e-2));
    // Gradients flow to the float32 parameter through the cached cast, summed over both uses.
    (sum(a) + sum(b)).backward();
    EXPECT_EQ(w.grad().dtype(), DType::f32);
    EXPECT_TRUE(all_close(w.grad(), mul(sum(x, {0}), 2.0).unsqueeze(0).expand({4, 3}), 1e-2, 1e-2));
  }
  EXPECT_EQ(amp::autocast_cache_size(), 0u);
}

TEST(Autocast, BackwardInsideTheScopeEqualsBackwardOutside) {
  const uint64_t seed = fresh_seed();
  const Tensor x = random_tensor({8, 6}, seed, -1, 1, DType::f32);
  const Tensor y = randint(0, 3, {8}, {.dtype = DType::i64});
  manual_seed(seed);
  nn::MLP a({6, 16, 3});
  nn::MLP b({6, 16, 3});
  b.load_state_dict(a.state_dict());
  {
    amp::Autocast autocast(DType::f16);
    cross_entropy(a(x), y).backward();
  }
  Tensor loss_b;
  {
    amp::Autocast autocast(DType::f16);
    loss_b = cross_entropy(b(x), y);
  }
  loss_b.backward();
  for (size_t i = 0; i < a.parameters().size(); ++i) {
    EXPECT_TRUE(all_close(a.parameters()[i].grad(), b.parameters()[i].grad(), 0, 0));
  }
}

TEST(Autocast, CheckpointedSegmentsRecomputeUnderTheForwardsScope) {
  const uint64_t seed = fresh_seed();
  const Tensor x = random_tensor({8, 1, 6, 6}, seed, -1, 1, DType::f32);
  const Tensor y = randint(0, 4, {8}, {.dtype = DType::i64});
  auto make = [&] {
    manual_seed(seed);
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(1, 3, nn::Size2{3, 3}), std::make_shared<nn::BatchNorm2d>(3),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(3 * 4 * 4, 4)});
  };
  auto plain = make(), ckpt = make();
  ckpt->checkpoint_every(2);
  for (const auto& net : {plain, ckpt}) {
    Tensor loss;
    {
      amp::Autocast autocast(DType::bf16);
      loss = cross_entropy((*net)(x), y);
    }
    loss.backward();  // the recomputation runs here, after the scope ended
  }
  const auto p = plain->named_parameters(), c = ckpt->named_parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_TRUE(all_close(c[i].second.grad(), p[i].second.grad(), 0, 0)) << p[i].first;
  }
  // BatchNorm's running statistics were updated once, by the forward, not again by recomputing.
  const auto pb = plain->named_buffers(), cb = ckpt->named_buffers();
  for (size_t i = 0; i < pb.size(); ++i) {
    EXPECT_TRUE(all_close(cb[i].second, pb[i].second, 0, 0)) << pb[i].first;
  }
}

}  // namespace
}  // namespace gradus::testing
