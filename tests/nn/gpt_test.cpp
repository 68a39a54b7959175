// nn::GPT: the published GPT-2 size, nanoGPT / Hugging Face names with a tied head, causality,
// generation and configuration errors.
#include <gtest/gtest.h>

#include "gradus/gradus.h"
#include "support/test_util.h"

namespace gradus {
namespace {

nn::GPTConfig tiny() {
  nn::GPTConfig c;
  c.vocab_size = 37;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

TEST(GPT, Gpt2SmallHasThePublishedParameterCount) {
  nn::GPT model(nn::GPTConfig::gpt2());
  EXPECT_EQ(model.num_parameters(), 124439808);
}

TEST(GPT, NamesAreNanoGptsAndTheHeadIsTied) {
  nn::GPT model(tiny());
  const nn::StateDict sd = model.state_dict();
  for (const char* k :
       {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
        "transformer.h.0.attn.c_attn.weight", "transformer.h.1.mlp.c_proj.bias",
        "transformer.ln_f.bias", "lm_head.weight"}) {
    EXPECT_TRUE(sd.contains(k)) << k;
  }
  EXPECT_EQ(sd.at("lm_head.weight").impl(), sd.at("transformer.wte.weight").impl());
  EXPECT_EQ(sd.at("transformer.h.0.attn.c_attn.weight").sizes(), (Shape{48, 16}));
}

TEST(GPT, LaterTokensDoNotChangeEarlierLogits) {
  manual_seed(testing::fresh_seed());
  nn::GPT model(tiny());
  Tensor a = randint(0, 37, {2, 10});
  Tensor b = a.clone();
  b.narrow(1, 6, 4).copy_(randint(0, 37, {2, 4}));
  const Tensor la = model.forward(a), lb = model.forward(b);
  EXPECT_EQ(la.sizes(), (Shape{2, 10, 37}));
  EXPECT_TRUE(testing::all_close(la.narrow(1, 0, 6), lb.narrow(1, 0, 6), 0, 0));
  EXPECT_GT(max(abs(sub(la.narrow(1, 6, 4), lb.narrow(1, 6, 4)))).item(), 1e-4);
}

TEST(GPT, GenerateAppendsTokensDeterministicallyAndTopOneIsGreedy) {
  manual_seed(testing::fresh_seed());
  nn::GPT model(tiny());
  const Tensor prompt = randint(0, 37, {1, 5});
  Generator g1(3), g2(3);
  nn::GenerateOptions o;
  o.max_new_tokens = 20;  // runs past block_size: the context is cropped
  o.top_k = 5;
  o.generator = &g1;
  const Tensor s1 = model.generate(prompt, o);
  o.generator = &g2;
  const Tensor s2 = model.generate(prompt, o);
  EXPECT_EQ(s1.sizes(), (Shape{1, 25}));
  EXPECT_EQ(s1.to_vector<int64_t>(), s2.to_vector<int64_t>());
  EXPECT_TRUE(model.is_training()) << "generate restores the training mode";
  // top_k = 1: always the argmax of the last position.
  o.top_k = 1;
  o.max_new_tokens = 1;
  const Tensor next = model.generate(prompt, o).narrow(1, 5, 1);
  model.eval();
  const Tensor expect = argmax(model.forward(prompt).select(1, 4), -1);
  EXPECT_EQ(next.reshape({1}).to_vector<int64_t>(), expect.to_vector<int64_t>());
}

TEST(GPT, BadConfigurationsAndInputsNameTheProblem) {
  nn::GPTConfig c = tiny();
  c.n_head = 3;
  EXPECT_THROW(nn::GPT{c}, ValueError);
  c = tiny();
  c.dropout = 1.0;
  EXPECT_THROW(nn::GPT{c}, ValueError);
  nn::GPT model(tiny());
  EXPECT_THROW(model.forward(randint(0, 37, {1, 17})), ValueError);  // longer than block_size
  EXPECT_THROW(model.forward(randn({1, 4})), ValueError);            // not token ids
  nn::GenerateOptions o;
  o.temperature = 0;
  EXPECT_THROW(model.generate(randint(0, 37, {1, 2}), o), ValueError);
}

}  // namespace
}  // namespace gradus
