// What every causal language model of gradus shares: sampling continuations, and the model as a
// sequence of layers for a pipeline to cut into stages.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gradus/core/random.h"
#include "gradus/nn/container.h"

namespace gradus::nn {

struct GenerateOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // > 0
  int64_t top_k = 0;         // 0: sample from the whole vocabulary
  Generator* generator = nullptr;
};

// Appends max_new_tokens sampled tokens to idx [B, T] with `model` (ids [B, t] -> logits
// [B, t, vocab]) in eval mode without gradients, feeding at most `context` tokens back each step.
// Returns [B, T + max_new_tokens].
Tensor generate(Module& model, int64_t context, const Tensor& idx, const GenerateOptions& options);

// A model as a sequence of layers sharing its modules and weights, with the same function as the
// model's forward. paths[i] is where layer i sits in the model (e.g. "transformer.h.0"), so layer
// i's "name" is the model's paths[i] + ".name" (dist::PipelineOptions::layer_paths).
struct LayerSequence {
  std::shared_ptr<Sequential> layers;
  std::vector<std::string> paths;
};

// The layers of a decoder-only transformer: its embedding layer (at path `embedding_path`), each
// block (at blocks_path.0, blocks_path.1, ...), the final norm and the head (at their paths).
LayerSequence decoder_layers(std::shared_ptr<Module> embedding, const std::string& embedding_path,
                             const ModuleList& blocks, const std::string& blocks_path,
                             std::shared_ptr<Module> final_norm, const std::string& norm_path,
                             std::shared_ptr<Module> head, const std::string& head_path);

}  // namespace gradus::nn
