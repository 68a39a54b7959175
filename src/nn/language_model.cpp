// Sampling from a causal language model (gradus/nn/language_model.h).
#include "gradus/nn/language_model.h"

#include <cmath>
#include <limits>

#include "gradus/autograd.h"
#include "gradus/ops.h"

namespace gradus::nn {

Tensor generate(Module& model, int64_t context, const Tensor& idx, const GenerateOptions& o) {
  GRADUS_CHECK(std::isfinite(o.temperature) && o.temperature > 0, ValueError,
               "generate: temperature must be positive, got ", o.temperature);
  GRADUS_CHECK(o.top_k >= 0 && o.max_new_tokens >= 0, ValueError,
               "generate: top_k and max_new_tokens must be non-negative");
  GRADUS_CHECK(context > 0, ValueError, "generate: context must be positive, got ", context);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  Tensor seq = idx;
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const int64_t t = seq.size(1);
    const Tensor window = t > context ? seq.narrow(1, t - context, context) : seq;
    const Tensor logits = model.forward(window.contiguous());
    Tensor last = div(logits.select(1, logits.size(1) - 1).to(DType::f32), o.temperature);
    if (o.top_k > 0 && o.top_k < last.size(-1)) {
      // Everything below the k-th largest logit gets probability 0.
      const Tensor kth = topk(last, o.top_k, -1).values.narrow(-1, o.top_k - 1, 1);
      last = masked_fill(last, lt(last, kth), -std::numeric_limits<double>::infinity());
    }
    const Tensor next = multinomial(softmax(last, -1), 1, o.generator);
    seq = cat({seq, next.to(seq.device())}, 1);
  }
  model.train(was_training);
  return seq;
}

}  // namespace gradus::nn
