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

LayerSequence decoder_layers(std::shared_ptr<Module> embedding, const std::string& embedding_path,
                             const ModuleList& blocks, const std::string& blocks_path,
                             std::shared_ptr<Module> final_norm, const std::string& norm_path,
                             std::shared_ptr<Module> head, const std::string& head_path) {
  LayerSequence out{std::make_shared<Sequential>(), {embedding_path}};
  out.layers->push_back(std::move(embedding));
  int64_t i = 0;
  for (const auto& block : blocks) {
    out.layers->push_back(block);
    out.paths.push_back(blocks_path + "." + std::to_string(i++));
  }
  out.layers->push_back(std::move(final_norm));
  out.paths.push_back(norm_path);
  out.layers->push_back(std::move(head));
  out.paths.push_back(head_path);
  return out;
}

}  // namespace gradus::nn
