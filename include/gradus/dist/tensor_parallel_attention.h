// GPT's causal self-attention with its heads split over the ranks of a group (Megatron-style):
// each rank projects q, k and v for its n_head / size heads (a column-parallel slice of c_attn),
// runs the fused attention on them, and projects back with its columns of c_proj (row-parallel);
// one all-reduce forward and one backward.
//
//   manual_seed(s);
//   dist::TensorParallelSelfAttention attn(config, tp_group);   // ==
//   nn::CausalSelfAttention(config)
//                                                                //    built after manual_seed(s)
//
// c_attn stacks q, k and v ([3C, C]); rank r keeps rows [r*C/size, (r+1)*C/size) of each of the
// three blocks, so full_state_dict() / load_full_state_dict() use the one-device (and Hugging Face
// GPT-2) layout. Attention dropout is refused (a rank's heads are not rows of the one-device
// draw, so it could not match); residual dropout works (its input is replicated).
#pragma once

#include <memory>

#include "gradus/dist/process_group.h"
#include "gradus/nn/gpt.h"

namespace gradus::dist {

class TensorParallelSelfAttention : public nn::Module {
 public:
  // Builds the one-device block from the current random state (as nn::CausalSelfAttention(config)
  // would) and keeps this rank's slices. ValueError when n_head does not divide over the group
  // or config.dropout > 0 (attention dropout).
  TensorParallelSelfAttention(const nn::GPTConfig& config,
                              std::shared_ptr<ProcessGroup> group = nullptr);
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C], replicated on every rank
  std::string type_name() const override { return "TensorParallelSelfAttention"; }
  // {"c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias"} of the one-device block,
  // gathered (a collective).
  nn::StateDict full_state_dict() const;
  void load_full_state_dict(const nn::StateDict& full);

  int64_t n_embd, n_head, local_heads, local_width;
  Tensor qkv_weight, qkv_bias;  // [3 * local_width, C]: this rank's q, k and v rows
  Tensor proj_weight;           // [C, local_width]: this rank's columns of c_proj
  Tensor proj_bias;             // [C], the full bias on every rank

 private:
  std::shared_ptr<ProcessGroup> group_;
};

}  // namespace gradus::dist
