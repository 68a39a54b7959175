// Loss and perplexity of a language model on consecutive windows (language_model_eval.h).
#include "gradus/train/language_model_eval.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gradus/amp/autocast.h"
#include "gradus/autograd.h"
#include "gradus/ops.h"

namespace gradus::train {

LanguageModelEval evaluate_language_model(nn::Module& model, const data::TokenArray& tokens,
                                          const LanguageModelEvalOptions& o) {
  GRADUS_CHECK(o.context > 0 && o.batch_size > 0, ValueError,
               "evaluate_language_model: context and batch_size must be positive, got ", o.context,
               " and ", o.batch_size);
  const int64_t windows = tokens.size() > 0 ? (tokens.size() - 1) / o.context : 0;
  GRADUS_CHECK(windows > 0, ValueError, "evaluate_language_model: ", tokens.size(),
               " tokens hold no window of ", o.context, " tokens and its next token");
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  amp::Autocast autocast(o.autocast.value_or(DType::bf16), o.autocast.has_value());
  CrossEntropyOptions summed;
  summed.reduction = Reduction::sum;
  Tensor total;  // on the device: one read at the end
  for (int64_t first = 0; first < windows; first += o.batch_size) {
    const int64_t n = std::min(o.batch_size, windows - first);
    std::vector<int64_t> x(static_cast<size_t>(n * o.context)), y(x.size());
    for (int64_t w = 0; w < n; ++w) {
      const int64_t start = (first + w) * o.context;
      for (int64_t t = 0; t < o.context; ++t) {
        x[static_cast<size_t>(w * o.context + t)] = tokens[start + t];
        y[static_cast<size_t>(w * o.context + t)] = tokens[start + t + 1];
      }
    }
    const TensorOptions ids{.dtype = DType::i64};
    const Tensor logits = model(from_vector(x, {n, o.context}, ids).to(o.device));
    const int64_t vocab = logits.size(-1);
    const int64_t largest = *std::max_element(y.begin(), y.end());
    GRADUS_CHECK(largest < vocab, ValueError, "evaluate_language_model: token ", largest,
                 " is not below the model's vocabulary (", vocab, ")");
    const Tensor targets = from_vector(y, {n * o.context}, ids).to(o.device);
    // 16-bit logits (autocast) are widened for the loss; float32 and float64 ones kept.
    const Tensor wide = is_floating(logits.dtype()) && dtype_size(logits.dtype()) < 4
                            ? logits.to(DType::f32)
                            : logits;
    const Tensor loss = cross_entropy(wide.reshape({-1, vocab}), targets, summed).to(DType::f64);
    total = total.defined() ? add(total, loss) : loss;
  }
  model.train(was_training);
  LanguageModelEval out;
  out.windows = windows;
  out.tokens = windows * o.context;
  out.loss = total.item() / static_cast<double>(out.tokens);
  out.perplexity = std::exp(out.loss);
  return out;
}

}  // namespace gradus::train
