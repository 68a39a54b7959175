// A tiny float64 GPT for the tests of sharded training and its checkpoints: the model, its
// optimizers, random token batches and the loss.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gradus/nn/gpt.h"
#include "gradus/ops.h"
#include "gradus/optim/optim.h"
#include "gradus/train/strategy.h"
#include "support/test_util.h"

namespace gradus::testing {

inline nn::GPTConfig tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 8;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 12;
  return c;
}

inline std::shared_ptr<nn::GPT> build_gpt(uint64_t seed, int64_t checkpoint_every = 0) {
  manual_seed(seed);
  auto m = std::make_shared<nn::GPT>(tiny_gpt());
  m->to(DType::f64);
  m->checkpoint_every = checkpoint_every;
  return m;
}

inline std::unique_ptr<optim::Optimizer> gpt_optimizer(const std::string& kind,
                                                       std::vector<Tensor> params) {
  if (kind == "sgd") {
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3});
  }
  return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 1e-2});
}

inline Tensor tokens(const Shape& shape, uint64_t seed) {
  const double top = static_cast<double>(tiny_gpt().vocab_size) - 0.01;
  return floor(random_tensor(shape, seed, 0, top)).to(DType::i64);
}

inline Tensor lm_loss(nn::Module& model, const Tensor& idx, const Tensor& targets) {
  const Tensor logits = model(idx);
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

// A global batch of `rows` token windows and their targets, drawn from the seed and the step (the
// same on every rank).
struct TokenBatch {
  Tensor idx, targets;
};
inline TokenBatch token_batch(int64_t rows, uint64_t seed, int64_t step) {
  const int64_t t = tiny_gpt().block_size;
  return {tokens({rows, t}, seed + 10 + static_cast<uint64_t>(step)),
          tokens({rows, t}, seed + 40 + static_cast<uint64_t>(step))};
}

// One step of `strategy` on this rank's `rows` rows of the global batch.
inline void strategy_step(train::Strategy& strategy, const TokenBatch& batch, int rank,
                          int64_t rows) {
  static amp::GradScaler no_scaling({.enabled = false});
  strategy.optimizer().zero_grad();
  strategy.before_forward();
  lm_loss(strategy.module(), batch.idx.slice(0, rank * rows, (rank + 1) * rows),
          batch.targets.slice(0, rank * rows, (rank + 1) * rows))
      .backward();
  strategy.step(no_scaling, 0.0);
}

}  // namespace gradus::testing
