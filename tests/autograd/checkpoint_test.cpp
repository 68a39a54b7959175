// Activation checkpointing: gradients bitwise equal to the plain run on the CPU (with dropout,
// whose masks must be replayed), nested checkpoints, Sequential segments, no_grad, and a clear
// error for a function whose result needs no gradient.
#include <gtest/gtest.h>

#include "gradus/gradus.h"
#include "support/test_util.h"

namespace gradus {
namespace {

using testing::fresh_seed;
using testing::random_tensor;

std::shared_ptr<nn::Sequential> deep_mlp(uint64_t seed, int blocks) {
  manual_seed(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(16, 32));
  for (int i = 0; i < blocks; ++i) {
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Dropout>(0.2));
    net->push_back(std::make_shared<nn::Linear>(32, 32));
  }
  net->push_back(std::make_shared<nn::Linear>(32, 4));
  return net;
}

std::vector<std::vector<double>> grads_of(nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.grad().to_vector<double>());
  return out;
}

// Trains two identical nets three steps, one with checkpointed segments; every gradient and the
// input gradient must match bit for bit (f64 and f32), dropout included.
TEST(Checkpoint, SequentialSegmentsGiveBitwiseEqualGradients) {
  for (DType dtype : {DType::f64, DType::f32}) {
    for (int64_t every : {1, 3, 5}) {
      const uint64_t seed = fresh_seed();
      auto plain = deep_mlp(seed, 6);
      auto ckpt = deep_mlp(seed, 6);
      plain->to(dtype);
      ckpt->to(dtype);
      ckpt->checkpoint_every(every);
      for (int step = 0; step < 3; ++step) {
        const Tensor x =
            random_tensor({8, 16}, seed + 10 + static_cast<uint64_t>(step), -1, 1, DType::f64)
                .to(dtype);
        Tensor xa = x.clone().set_requires_grad(), xb = x.clone().set_requires_grad();
        const uint64_t draw = fresh_seed();
        plain->zero_grad();
        ckpt->zero_grad();
        manual_seed(draw);
        sum(mul((*plain)(xa), (*plain)(xa))).backward();
        manual_seed(draw);
        sum(mul((*ckpt)(xb), (*ckpt)(xb))).backward();
        EXPECT_EQ(grads_of(*ckpt), grads_of(*plain))
            << dtype_name(dtype) << " every " << every << " step " << step;
        EXPECT_EQ(xb.grad().to_vector<double>(), xa.grad().to_vector<double>());
      }
    }
  }
}

// nn::Checkpoint(module) on single blocks: same gradients, same state_dict names, and the
// segment really is recomputed (a second forward through the block during backward).
TEST(Checkpoint, ModuleFlagKeepsNamesAndGradients) {
  const uint64_t seed = fresh_seed();
  auto plain = deep_mlp(seed, 4);
  auto ckpt = deep_mlp(seed, 4);
  int forwards = 0;
  struct Counting : nn::Module {
    int* count;
    explicit Counting(int* c) : count(c) {}
    Tensor forward(const Tensor& x) override {
      ++*count;
      return relu(x);
    }
  };
  auto counted = std::make_shared<Counting>(&forwards);
  auto wrapped = std::make_shared<nn::Sequential>();
  for (const auto& [name, child] : ckpt->named_children()) {
    wrapped->push_back(
        name, name == "1" ? nn::Checkpoint(std::make_shared<nn::Sequential>(
                                std::initializer_list<std::shared_ptr<nn::Module>>{counted, child}))
                          : nn::Checkpoint(child));
  }
  std::vector<std::string> names_plain, names_wrapped;
  for (const auto& kv : plain->state_dict()) names_plain.push_back(kv.first);
  for (const auto& kv : wrapped->state_dict()) names_wrapped.push_back(kv.first);
  EXPECT_EQ(names_plain, names_wrapped);
  const Tensor x = random_tensor({8, 16}, seed + 1, -1, 1, DType::f32);
  const uint64_t draw = fresh_seed();
  manual_seed(draw);
  sum(mul((*plain)(x), (*plain)(x))).backward();
  manual_seed(draw);
  sum(mul((*wrapped)(x), (*wrapped)(x))).backward();
  EXPECT_EQ(forwards, 4);  // two forwards, two recomputations
  EXPECT_EQ(grads_of(*wrapped), grads_of(*plain));
  EXPECT_TRUE(wrapped->named_children()[0].second->is_checkpointed());
}

TEST(Checkpoint, NestedCheckpointsMatchThePlainComputation) {
  const uint64_t seed = fresh_seed();
  Tensor w = random_tensor({6, 6}, seed, -1, 1).set_requires_grad();
  Tensor x = random_tensor({3, 6}, seed + 1, -1, 1).set_requires_grad();
  auto inner = [&](const std::vector<Tensor>& in) { return tanh(matmul(in[0], w)); };
  auto outer = [&](const std::vector<Tensor>& in) {
    Tensor h = checkpoint(inner, {in[0]}, {w});
    return exp(matmul(h, w));
  };
  sum(checkpoint(outer, {x}, {w})).backward();
  Tensor w2 = w.detach().clone().set_requires_grad();
  Tensor x2 = x.detach().clone().set_requires_grad();
  sum(exp(matmul(tanh(matmul(x2, w2)), w2))).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), w2.grad().to_vector<double>());
  EXPECT_EQ(x.grad().to_vector<double>(), x2.grad().to_vector<double>());
}

// No input requires grad (the data), but the segment's parameters do: they still get gradients.
TEST(Checkpoint, ParametersGetGradientsWhenNoInputRequiresGrad) {
  Tensor w = random_tensor({4, 4}, fresh_seed(), -1, 1).set_requires_grad();
  const Tensor x = random_tensor({2, 4}, fresh_seed(), -1, 1);
  sum(checkpoint([&](const std::vector<Tensor>& in) { return matmul(in[0], w); }, {x}, {w}))
      .backward();
  Tensor w2 = w.detach().clone().set_requires_grad();
  sum(matmul(x, w2)).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), w2.grad().to_vector<double>());
}

TEST(Checkpoint, UnderNoGradAndBadUse) {
  Tensor x = random_tensor({3}, fresh_seed(), -1, 1).set_requires_grad();
  {
    NoGradGuard no_grad;
    const Tensor y = checkpoint([](const std::vector<Tensor>& in) { return mul(in[0], 2.0); }, {x});
    EXPECT_FALSE(y.requires_grad());
  }
  // A result that depends on nothing requiring grad: a clear error at backward.
  const Tensor y =
      checkpoint([](const std::vector<Tensor>& in) { return ones({3}, {in[0].dtype()}); }, {x});
  try {
    sum(y).backward();
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("does not require grad"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradus
