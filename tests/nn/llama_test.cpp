// nn::Llama and its pieces: RoPE and RMSNorm against their formulas written out in float64,
// grouped-query attention as multi-head attention with repeated key/value heads, causality, the
// model as pipeline layers, generation, configuration errors, and the language-model evaluation
// against the windows' losses summed here.
#include <gtest/gtest.h>

#include <cmath>

#include "gradus/gradus.h"
#include "gradus/train/language_model_eval.h"
#include "support/test_util.h"

namespace gradus {
namespace {

using testing::all_close;
using testing::fresh_seed;
using testing::random_tensor;

nn::LlamaConfig tiny(int64_t kv_heads = 2) {
  nn::LlamaConfig c;
  c.vocab_size = 41;
  c.block_size = 12;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = kv_heads;
  c.n_embd = 32;
  c.ffn_hidden = 48;
  return c;
}

TEST(Rotary, TablesAndRotationAreTheFormula) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t t = 9, d = 6;
  const double theta = 500.0;
  const auto [cos, sin] = rotary_tables(t, d, theta, {.dtype = DType::f64});
  const Tensor x = random_tensor({2, t, d}, seed);
  const std::vector<double> xv = testing::values_of(x);
  std::vector<double> expected(xv.size());
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t p = 0; p < t; ++p) {
      for (int64_t i = 0; i < d / 2; ++i) {
        const double angle = static_cast<double>(p) * std::pow(theta, -2.0 * i / d);
        const size_t row = static_cast<size_t>((b * t + p) * d);
        const double x1 = xv[row + i], x2 = xv[row + i + d / 2];
        expected[row + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
        expected[row + i + d / 2] = x2 * std::cos(angle) + x1 * std::sin(angle);
      }
    }
  }
  EXPECT_TRUE(all_close(rotary_embedding(x, cos, sin),
                        tensor(expected, {2, t, d}, {.dtype = DType::f64}), 1e-12, 1e-12));
  EXPECT_THROW(rotary_embedding(x, cos.narrow(0, 0, t - 1), sin), ShapeError);
  EXPECT_THROW(rotary_tables(4, 5, theta), ValueError);  // an odd head size has no pairs
}

// The heads of a [B, T, H * D] projection keep that memory order through RoPE and attention, so
// merging attention's heads for o_proj is a view of its output; the values and the gradients back
// to the projections match the same ops on contiguous [B, H, T, D] heads.
TEST(Rotary, HeadsOfAProjectionStayInItsLayoutThroughAttention) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  const int64_t b = 2, t = 7, h = 4, kv = 2, d = 8;
  const auto [cos, sin] = rotary_tables(t, d, 1e4, {});
  const Tensor xq = random_tensor({b, t, h * d}, seed).to(DType::f32).set_requires_grad(true);
  const Tensor xk = random_tensor({b, t, kv * d}, seed + 1).to(DType::f32).set_requires_grad(true);
  const Tensor xv = random_tensor({b, t, kv * d}, seed + 2).to(DType::f32);
  auto heads = [&](const Tensor& y, int64_t n) { return y.reshape({b, t, n, d}).transpose(1, 2); };
  const Tensor q = rotary_embedding(heads(xq, h), cos, sin);
  const Tensor k = rotary_embedding(heads(xk, kv), cos, sin);
  EXPECT_TRUE(q.transpose(1, 2).is_contiguous()) << "strides " << shape_str(q.strides());
  EXPECT_TRUE(k.transpose(1, 2).is_contiguous());
  AttentionOptions o;
  o.causal = true;
  o.enable_gqa = true;
  const Tensor y = scaled_dot_product_attention(q, k, heads(xv, kv), o);
  const Tensor merged = y.transpose(1, 2).reshape({b, t, h * d});
  EXPECT_EQ(merged.data_ptr<float>(), y.data_ptr<float>()) << "merging the heads copied";
  const Tensor grad = random_tensor({b, t, h * d}, seed + 3).to(DType::f32);
  merged.backward(grad);

  // The same computation on contiguous heads.
  const Tensor xq2 = xq.detach().clone().set_requires_grad(true);
  const Tensor xk2 = xk.detach().clone().set_requires_grad(true);
  const Tensor q2 = rotary_embedding(heads(xq2, h).contiguous(), cos, sin);
  const Tensor k2 = rotary_embedding(heads(xk2, kv).contiguous(), cos, sin);
  const Tensor y2 = scaled_dot_product_attention(q2, k2, heads(xv, kv).contiguous(), o);
  EXPECT_TRUE(all_close(merged, y2.transpose(1, 2).reshape({b, t, h * d}), 1e-6, 1e-6));
  y2.transpose(1, 2).reshape({b, t, h * d}).backward(grad);
  EXPECT_TRUE(all_close(xq.grad(), xq2.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(xk.grad(), xk2.grad(), 1e-5, 1e-6));
}

TEST(RmsNorm, IsTheFormula) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  const Tensor x = random_tensor({3, 7}, seed, -2, 2);
  const Tensor w = random_tensor({7}, seed + 1, 0.5, 1.5);
  const std::vector<double> xv = testing::values_of(x), wv = testing::values_of(w);
  std::vector<double> expected(xv.size());
  for (size_t r = 0; r < 3; ++r) {
    double ms = 0;
    for (size_t i = 0; i < 7; ++i) ms += xv[r * 7 + i] * xv[r * 7 + i] / 7.0;
    for (size_t i = 0; i < 7; ++i)
      expected[r * 7 + i] = xv[r * 7 + i] / std::sqrt(ms + 1e-5) * wv[i];
  }
  EXPECT_TRUE(all_close(rms_norm(x, {7}, w, 1e-5), tensor(expected, {3, 7}, {.dtype = DType::f64}),
                        1e-12, 1e-12));
  EXPECT_THROW(rms_norm(x, {6}, w), ShapeError);
}

TEST(Llama, NamesAreTransformersAndTheHeadIsUntiedUnlessAsked) {
  nn::Llama model(tiny());
  const nn::StateDict sd = model.state_dict();
  for (const char* k :
       {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight", "model.layers.1.mlp.gate_proj.weight",
        "model.layers.1.post_attention_layernorm.weight", "model.norm.weight", "lm_head.weight"}) {
    EXPECT_TRUE(sd.contains(k)) << k;
  }
  EXPECT_EQ(sd.at("model.layers.0.self_attn.k_proj.weight").sizes(), (Shape{16, 32}));  // 2 x 8
  EXPECT_NE(sd.at("lm_head.weight").impl(), sd.at("model.embed_tokens.weight").impl());
  nn::LlamaConfig tied = tiny();
  tied.tie_embeddings = true;
  nn::Llama t(tied);
  EXPECT_EQ(t.state_dict().at("lm_head.weight").impl(),
            t.state_dict().at("model.embed_tokens.weight").impl());
}

TEST(Llama, GroupedQueryAttentionIsMultiHeadWithRepeatedKeyValueHeads) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  manual_seed(seed);
  nn::Llama gqa(tiny(2));
  nn::Llama mha(tiny(4));
  // MHA's key/value heads 0, 1 are GQA's head 0 and 2, 3 its head 1 (8 rows per head).
  nn::StateDict state;
  const nn::StateDict gqa_state = gqa.state_dict();
  for (const auto& [name, t] : gqa_state.items()) {
    if (name.ends_with("k_proj.weight") || name.ends_with("v_proj.weight")) {
      state.insert(
          name,
          cat({t.narrow(0, 0, 8), t.narrow(0, 0, 8), t.narrow(0, 8, 8), t.narrow(0, 8, 8)}, 0));
    } else {
      state.insert(name, t);
    }
  }
  {
    NoGradGuard no_grad;
    mha.load_state_dict(state);
  }
  gqa.to(DType::f64);
  mha.to(DType::f64);
  const Tensor idx = randint(0, 41, {2, 10}, {.dtype = DType::i64});
  EXPECT_TRUE(all_close(gqa(idx), mha(idx), 1e-12, 1e-12));
  nn::LlamaConfig bad = tiny(3);
  EXPECT_THROW(nn::Llama{bad}, ValueError);
}

TEST(Llama, LaterTokensDoNotChangeEarlierLogitsAndLayersAreTheModel) {
  manual_seed(fresh_seed());
  nn::Llama model(tiny());
  model.to(DType::f64);
  const Tensor idx = randint(0, 41, {2, 10}, {.dtype = DType::i64});
  Tensor changed = idx.clone();
  changed.narrow(1, 7, 3).copy_(randint(0, 41, {2, 3}, {.dtype = DType::i64}));
  const Tensor a = model(idx), b = model(changed);
  EXPECT_TRUE(all_close(a.narrow(1, 0, 7), b.narrow(1, 0, 7), 1e-12, 1e-12));
  const nn::LayerSequence layers = nn::llama_layers(model);
  EXPECT_EQ(layers.paths.size(), 5u);  // embedding, 2 layers, norm, head
  EXPECT_TRUE(all_close(layers.layers->forward(idx), a, 1e-12, 1e-12));
}

TEST(Llama, ActivationCheckpointingGivesTheSameGradients) {
  manual_seed(fresh_seed());
  nn::Llama model(tiny());
  const Tensor idx = randint(0, 41, {2, 10}, {.dtype = DType::i64});
  auto grads = [&](int64_t every) {
    model.checkpoint_every = every;
    model.zero_grad();
    square(model(idx)).mean().backward();
    std::vector<std::vector<double>> out;
    for (const Tensor& p : model.parameters()) out.push_back(testing::values_of(p.grad()));
    return out;
  };
  const auto plain = grads(0);
  EXPECT_EQ(grads(1), plain);  // bit for bit on the CPU
  EXPECT_EQ(grads(2), plain);
}

TEST(Llama, GeneratesPastItsContextDeterministically) {
  manual_seed(fresh_seed());
  nn::Llama model(tiny());
  nn::GenerateOptions o;
  o.max_new_tokens = 20;  // past block_size 12: the window slides
  o.top_k = 5;
  Generator g1(7), g2(7);
  o.generator = &g1;
  const Tensor prompt = randint(0, 41, {1, 3}, {.dtype = DType::i64});
  const Tensor a = model.generate(prompt, o);
  o.generator = &g2;
  EXPECT_EQ(a.sizes(), (Shape{1, 23}));
  EXPECT_EQ(a.to_vector<int64_t>(), model.generate(prompt, o).to_vector<int64_t>());
}

TEST(LanguageModelEval, IsTheMeanLossOfConsecutiveWindows) {
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(seed);
  manual_seed(seed);
  nn::Llama model(tiny());
  model.to(DType::f64);
  std::vector<uint16_t> ids(103);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (uint16_t& v : ids) v = static_cast<uint16_t>(rng() % 41);
  const data::TokenArray tokens(ids);
  // Context 10: windows [0, 10) ... [90, 100), targets up to token 100; tokens 101, 102 unused.
  double sum = 0;
  for (int64_t w = 0; w < 10; ++w) {
    std::vector<int64_t> x(10), y(10);
    for (int64_t t = 0; t < 10; ++t) {
      x[t] = ids[w * 10 + t];
      y[t] = ids[w * 10 + t + 1];
    }
    const Tensor logits = model(from_vector(x, {1, 10}, {.dtype = DType::i64}));
    sum += cross_entropy(logits.reshape({10, 41}), from_vector(y, {10}, {.dtype = DType::i64}))
               .item() *
           10;
  }
  train::LanguageModelEvalOptions o;
  o.context = 10;
  o.batch_size = 3;  // a partial last batch
  const train::LanguageModelEval r = train::evaluate_language_model(model, tokens, o);
  EXPECT_EQ(r.windows, 10);
  EXPECT_EQ(r.tokens, 100);
  // (Batches of 3 windows and of 1 round differently in float64: relative 1e-12 apart at most.)
  EXPECT_NEAR(r.loss, sum / 100, 1e-12 * sum / 100);
  EXPECT_NEAR(r.perplexity, std::exp(sum / 100), 1e-11 * std::exp(sum / 100));
  EXPECT_TRUE(model.is_training());  // its mode is put back
  o.context = 103;
  EXPECT_THROW(train::evaluate_language_model(model, tokens, o), ValueError);
  nn::LlamaConfig small = tiny();
  small.vocab_size = 20;  // tokens up to 40 are outside it: its embedding says so
  nn::Llama narrow(small);
  o.context = 10;
  EXPECT_THROW(train::evaluate_language_model(narrow, tokens, o), IndexError);
}

}  // namespace
}  // namespace gradus
