// A language model's loss on a token stream, as evaluation harnesses report it: the mean
// next-token cross-entropy over consecutive windows from the start, and its perplexity.
#pragma once

#include <cstdint>
#include <optional>

#include "gradus/data/text.h"
#include "gradus/nn/module.h"

namespace gradus::train {

struct LanguageModelEvalOptions {
  int64_t context = 256;   // tokens per window
  int64_t batch_size = 8;  // windows per forward
  Device device = Device::cpu();
  std::optional<DType> autocast;  // evaluate under this autocast dtype (bf16, f16)
};

struct LanguageModelEval {
  double loss = 0;        // mean over every predicted token, summed in float64
  double perplexity = 0;  // exp(loss)
  int64_t windows = 0;
  int64_t tokens = 0;  // predicted tokens: windows * context
};

// Window i feeds tokens [i c, (i + 1) c) and predicts tokens [i c + 1, (i + 1) c + 1) (c the
// context); the last window that lacks a full set of targets is dropped. `model` maps ids [B, c]
// to logits [B, c, vocab]; it runs in eval mode without gradients (its mode is put back).
// ValueError when the tokens hold no window, or a token is not below the logits' vocabulary.
LanguageModelEval evaluate_language_model(nn::Module& model, const data::TokenArray& tokens,
                                          const LanguageModelEvalOptions& options);

}  // namespace gradus::train
