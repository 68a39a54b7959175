// Tensor parallelism at every world size the dist label runs (1-4): the four differentiable
// mappings against gradients worked out by hand from every rank's inputs, and a tensor-parallel
// MLP block against the one-device model built from the same seed (float64, forward and every
// gradient), plus full state dicts.
#include <gtest/gtest.h>

#include "dist/dist_test_util.h"
#include "gradus/dist/tensor_parallel.h"
#include "gradus/dist/tensor_parallel_attention.h"
#include "gradus/nn/layers.h"
#include "gradus/nn/models.h"
#include "gradus/optim/optim.h"

namespace gradus::testing {
namespace {

constexpr int64_t kFeatures = 12;  // divides over 1, 2, 3 and 4 ranks

Tensor input(uint64_t seed, const Shape& shape, bool requires_grad = false) {
  Tensor t = random_tensor(shape, seed);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

TEST(TensorParallel, MappingsAndTheirTransposes) {
  auto g = dist::default_group();
  const int r = g->rank(), n = g->size();
  const int64_t k = kFeatures / n;
  const uint64_t seed = shared_seed();
  std::vector<Tensor> w(n);  // every rank's loss weights, rebuilt everywhere
  for (int q = 0; q < n; ++q) w[q] = random_tensor({3, kFeatures}, rank_seed(seed, q));

  // copy: identity forward; the replicated input's gradient sums every rank's.
  Tensor x = input(seed + 1, {3, kFeatures}, true);
  Tensor y = dist::copy_to_parallel_region(x);
  EXPECT_TRUE(all_close(y, x, 0, 0));
  sum(mul(y, w[r])).backward();
  Tensor expect = zeros_like(w[0]);
  for (int q = 0; q < n; ++q) expect = add(expect, w[q]);
  EXPECT_TRUE(all_close(x.grad(), expect, 1e-12, 1e-12));

  // reduce: the sum of every rank's input forward; identity backward.
  Tensor xr = input(rank_seed(seed + 2, r), {3, kFeatures}, true);
  y = dist::reduce_from_parallel_region(xr);
  expect = zeros_like(w[0]);
  for (int q = 0; q < n; ++q)
    expect = add(expect, random_tensor({3, kFeatures}, rank_seed(seed + 2, q)));
  EXPECT_TRUE(all_close(y, expect, 1e-12, 1e-12));
  sum(mul(y, w[0])).backward();
  EXPECT_TRUE(all_close(xr.grad(), w[0], 0, 0));

  // gather: every rank's [3, k] side by side; backward hands each rank its columns.
  Tensor xs = input(rank_seed(seed + 3, r), {3, k}, true);
  y = dist::gather_from_parallel_region(xs);
  ASSERT_EQ(y.sizes(), (Shape{3, kFeatures}));
  for (int q = 0; q < n; ++q) {
    EXPECT_TRUE(
        all_close(y.narrow(1, q * k, k), random_tensor({3, k}, rank_seed(seed + 3, q)), 0, 0));
  }
  sum(mul(y, w[0])).backward();
  EXPECT_TRUE(all_close(xs.grad(), w[0].narrow(1, r * k, k), 0, 0));

  // scatter: this rank's columns; backward gathers every rank's slice gradient.
  Tensor xf = input(seed + 4, {3, kFeatures}, true);
  y = dist::scatter_to_parallel_region(xf);
  EXPECT_TRUE(all_close(y, xf.detach().narrow(1, r * k, k), 0, 0));
  sum(mul(y, w[r].narrow(1, r * k, k))).backward();
  expect = zeros_like(w[0]);
  for (int q = 0; q < n; ++q) expect.narrow(1, q * k, k).copy_(w[q].narrow(1, q * k, k));
  EXPECT_TRUE(all_close(xf.grad(), expect, 0, 0));
}

TEST(TensorParallel, MlpBlockEqualsTheOneDeviceModel) {
  auto g = dist::default_group();
  const int r = g->rank();
  const uint64_t seed = shared_seed();
  const int64_t in = 8, out = 6;
  manual_seed(seed);
  dist::ColumnParallelLinear up(in, kFeatures, true, /*gather_output=*/false);
  dist::RowParallelLinear down(kFeatures, out, true, /*input_is_parallel=*/true);
  manual_seed(seed);
  nn::Linear ref_up(in, kFeatures), ref_down(kFeatures, out);
  for (nn::Module* m : std::initializer_list<nn::Module*>{&up, &down, &ref_up, &ref_down}) {
    m->to(DType::f64);
  }
  const Tensor x0 = random_tensor({5, in}, seed + 7), w = random_tensor({5, out}, seed + 8);
  Tensor x = x0.clone().set_requires_grad(), xr = x0.clone().set_requires_grad();
  const Tensor y = down(relu(up(x)));
  const Tensor yr = ref_down(relu(ref_up(xr)));
  EXPECT_TRUE(all_close(y, yr, 1e-12, 1e-12));
  sum(mul(y, w)).backward();
  sum(mul(yr, w)).backward();
  const int64_t k = up.local_out;
  EXPECT_TRUE(all_close(up.weight.grad(), ref_up.weight.grad().narrow(0, r * k, k), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(up.bias.grad(), ref_up.bias.grad().narrow(0, r * k, k), 1e-12, 1e-12));
  EXPECT_TRUE(
      all_close(down.weight.grad(), ref_down.weight.grad().narrow(1, r * k, k), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(down.bias.grad(), ref_down.bias.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(x.grad(), xr.grad(), 1e-12, 1e-12));

  // The full weights come back under nn::Linear's names and shapes, and load back in.
  const nn::StateDict full = up.full_state_dict();
  EXPECT_TRUE(all_close(full.at("weight"), ref_up.weight, 0, 0));
  EXPECT_TRUE(all_close(full.at("bias"), ref_up.bias, 0, 0));
  EXPECT_TRUE(all_close(down.full_state_dict().at("weight"), ref_down.weight, 0, 0));
  const Tensor other = random_tensor({kFeatures, in}, seed + 9);
  up.load_full_state_dict({{"weight", other}, {"bias", zeros({kFeatures}, {.dtype = DType::f64})}});
  EXPECT_TRUE(all_close(up.weight, other.narrow(0, r * k, k), 0, 0));
  EXPECT_THROW(up.load_full_state_dict({{"weight", other.t()}}), ShapeError);

  // gather_output: every rank gets the full output of a plain Linear.
  manual_seed(seed);
  dist::ColumnParallelLinear gathered(in, kFeatures, true, /*gather_output=*/true);
  gathered.to(DType::f64);
  manual_seed(seed);
  nn::Linear plain(in, kFeatures);
  plain.to(DType::f64);
  EXPECT_TRUE(all_close(gathered(x0), plain(x0), 1e-12, 1e-12));
}

TEST(TensorParallel, MlpModuleTrainsLikeNnMlp) {
  const uint64_t seed = shared_seed();
  manual_seed(seed);
  dist::TensorParallelMLP tp(10, kFeatures, 4, "gelu");
  manual_seed(seed);
  nn::MLP ref({10, kFeatures, 4}, "gelu");
  // Three SGD steps on the same batches: the weights stay equal to the one-device model's.
  optim::SGD opt_tp(tp.parameters(), {.lr = 0.1});
  optim::SGD opt_ref(ref.parameters(), {.lr = 0.1});
  for (int step = 0; step < 3; ++step) {
    const Tensor x = random_tensor({6, 10}, seed + 20 + step, -1, 1, DType::f32);
    const Tensor y = randint(0, 4, {6}, {.dtype = DType::i64});
    dist::default_group()->broadcast(y, 0, "labels")->wait();
    opt_tp.zero_grad();
    opt_ref.zero_grad();
    cross_entropy(tp(x), y).backward();
    cross_entropy(ref(x), y).backward();
    opt_tp.step();
    opt_ref.step();
  }
  const nn::StateDict full = tp.full_state_dict(), want = ref.state_dict();
  ASSERT_EQ(full.keys(), want.keys());
  for (const auto& [name, t] : want) {
    EXPECT_TRUE(all_close(full.at(name), t, 1e-5, 1e-6)) << name;
  }
}

TEST(TensorParallel, VocabParallelEmbeddingAndCrossEntropyEqualTheFullOnes) {
  auto g = dist::default_group();
  const int r = g->rank();
  const uint64_t seed = shared_seed();
  const int64_t vocab = kFeatures, dim = 5, k = kFeatures / g->size();
  manual_seed(seed);
  dist::VocabParallelEmbedding emb(vocab, dim);
  manual_seed(seed);
  nn::Embedding ref(vocab, dim);
  emb.to(DType::f64);
  ref.to(DType::f64);
  EXPECT_TRUE(all_close(emb.full_state_dict().at("weight"), ref.weight, 0, 0));
  std::vector<int64_t> id_values;
  for (int64_t i = 0; i < 2 * vocab; ++i)
    id_values.push_back((i * 7 + static_cast<int64_t>(seed % 5)) % vocab);
  const Tensor ids = from_vector(id_values, {4, 2 * vocab / 4}, {.dtype = DType::i64});
  const Tensor w = random_tensor({4, 2 * vocab / 4, dim}, seed + 1);
  const Tensor y = emb(ids), yr = ref(ids);
  EXPECT_TRUE(all_close(y, yr, 0, 0));
  sum(mul(y, w)).backward();
  sum(mul(yr, w)).backward();
  EXPECT_TRUE(all_close(emb.weight.grad(), ref.weight.grad().narrow(0, r * k, k), 1e-12, 1e-12));

  // Cross-entropy on this rank's classes equals cross_entropy on all of them, with gradients.
  const Tensor logits0 = random_tensor({7, vocab}, seed + 2, -3, 3);
  const Tensor target =
      from_vector(std::vector<int64_t>{0, 11, 5, 3, 7, 11, 1}, {7}, {.dtype = DType::i64});
  Tensor full = logits0.clone().set_requires_grad();
  Tensor shard = logits0.narrow(1, r * k, k).contiguous().set_requires_grad();
  const Tensor loss = dist::vocab_parallel_cross_entropy(shard, target);
  const Tensor loss_ref = cross_entropy(full, target);
  EXPECT_NEAR(loss.item(), loss_ref.item(), 1e-12);
  mul(loss, 3.0).backward();
  mul(loss_ref, 3.0).backward();
  EXPECT_TRUE(all_close(shard.grad(), full.grad().narrow(1, r * k, k), 1e-12, 1e-12));
}

TEST(TensorParallel, FeaturesThatDoNotDivideAreRefused) {
  const int n = dist::default_group()->size();
  if (n == 1) GTEST_SKIP() << "every size divides over one rank";
  try {
    dist::ColumnParallelLinear bad(4, 2 * n + 1);
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("out_features (" + std::to_string(2 * n + 1) +
                                         ") must be a positive multiple of the group size"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gradus::testing

namespace gradus::testing {
namespace {

// GPT's attention with its 12 heads split over the ranks equals nn::CausalSelfAttention built
// from the same seed: outputs, the input gradient and, through two SGD steps, every parameter
// gradient (the gathered weights after the steps), in float64; and the full state dict round trip.
TEST(TensorParallel, SelfAttentionEqualsTheOneDeviceBlock) {
  const uint64_t seed = shared_seed();
  nn::GPTConfig config;
  config.n_head = 12;  // divides over 1, 2, 3 and 4 ranks
  config.n_embd = 24;
  manual_seed(seed);
  dist::TensorParallelSelfAttention tp(config);
  tp.to(DType::f64);
  manual_seed(seed);
  nn::CausalSelfAttention ref(config);
  ref.to(DType::f64);
  optim::SGD opt_tp(tp.parameters(), {.lr = 0.5});
  optim::SGD opt_ref(ref.parameters(), {.lr = 0.5});
  for (int step = 0; step < 2; ++step) {
    Tensor x = random_tensor({2, 5, 24}, seed + step).to(DType::f64);
    x.set_requires_grad(true);
    Tensor x_ref = x.detach().clone();
    x_ref.set_requires_grad(true);
    const Tensor w = random_tensor({2, 5, 24}, seed + 10 + step).to(DType::f64);
    opt_tp.zero_grad();
    opt_ref.zero_grad();
    const Tensor y = tp(x), y_ref = ref(x_ref);
    EXPECT_TRUE(all_close(y, y_ref, 1e-12, 1e-13));
    sum(mul(y, w)).backward();
    sum(mul(y_ref, w)).backward();
    EXPECT_TRUE(all_close(x.grad(), x_ref.grad(), 1e-12, 1e-13));
    opt_tp.step();
    opt_ref.step();
  }
  const nn::StateDict full = tp.full_state_dict();
  ASSERT_EQ(full.size(), 4u);
  for (const auto& [name, p] : ref.named_parameters()) {
    ASSERT_NE(full.find(name), nullptr) << name;
    EXPECT_TRUE(all_close(*full.find(name), p, 1e-12, 1e-13)) << name;
  }
  // Loading the full weights back gives the same slices.
  dist::TensorParallelSelfAttention other(config);
  other.to(DType::f64);
  other.load_full_state_dict(full);
  EXPECT_TRUE(all_close(other.qkv_weight, tp.qkv_weight, 0, 0));
  EXPECT_TRUE(all_close(other.proj_weight, tp.proj_weight, 0, 0));
  // Heads that do not divide, and attention dropout, are refused.
  if (dist::world_size() > 1) {
    nn::GPTConfig odd = config;
    odd.n_head = dist::world_size() + 1;
    odd.n_embd = 2 * odd.n_head;
    EXPECT_THROW(dist::TensorParallelSelfAttention{odd}, ValueError);
  }
  nn::GPTConfig dropped = config;
  dropped.dropout = 0.1;
  EXPECT_THROW(dist::TensorParallelSelfAttention{dropped}, ValueError);
}

}  // namespace
}  // namespace gradus::testing
