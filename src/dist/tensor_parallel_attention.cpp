#include "gradus/dist/tensor_parallel_attention.h"

#include "dist/gather.h"

#include "gradus/autograd.h"
#include "gradus/dist/tensor_parallel.h"
#include "gradus/ops.h"

namespace gradus::dist {

TensorParallelSelfAttention::TensorParallelSelfAttention(const nn::GPTConfig& config,
                                                         std::shared_ptr<ProcessGroup> group)
    : n_embd(config.n_embd),
      n_head(config.n_head),
      group_(group ? std::move(group) : default_group()) {
  const int n = group_->size();
  GRADUS_CHECK(n_head % n == 0, ValueError, "TensorParallelSelfAttention: ", n_head,
               " heads do not divide over ", n, " rank(s)");
  GRADUS_CHECK(config.dropout == 0, ValueError,
               "TensorParallelSelfAttention: attention dropout (config.dropout = ", config.dropout,
               ") is not supported with tensor parallelism; train with dropout 0");
  local_heads = n_head / n;
  local_width = n_embd / n;
  // The one-device block, drawn exactly as nn::CausalSelfAttention draws it.
  nn::CausalSelfAttention full(config);
  const int64_t r = group_->rank(), k = local_width;
  NoGradGuard no_grad;
  // In nn::CausalSelfAttention's order (c_attn's weight and bias, then c_proj's), so that an
  // optimizer's state indices mean the same parameters in both.
  qkv_weight = register_parameter(
      "qkv_weight", detail::qkv_rows(full.c_attn->weight.detach(), n_embd, r, k).contiguous());
  if (config.bias) {
    qkv_bias = register_parameter(
        "qkv_bias", detail::qkv_rows(full.c_attn->bias.detach(), n_embd, r, k).contiguous());
  }
  proj_weight = register_parameter("proj_weight",
                                   full.c_proj->weight.detach().narrow(1, r * k, k).contiguous());
  if (config.bias) {
    proj_bias = register_parameter("proj_bias", full.c_proj->bias.detach().clone());
  }
}

Tensor TensorParallelSelfAttention::forward(const Tensor& x) {
  GRADUS_CHECK(x.dim() == 3 && x.size(2) == n_embd, ShapeError,
               "TensorParallelSelfAttention: expected [B, T, ", n_embd, "], got ",
               shape_str(x.sizes()));
  const int64_t b = x.size(0), t = x.size(1), k = local_width, hs = n_embd / n_head;
  const std::vector<Tensor> qkv =
      split(linear(copy_to_parallel_region(x, group_), qkv_weight, qkv_bias), k, 2);
  auto heads = [&](const Tensor& y) { return y.reshape({b, t, local_heads, hs}).transpose(1, 2); };
  AttentionOptions o;
  o.causal = true;
  const Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), o);
  // This rank's heads times its columns of c_proj: a partial sum over the heads.
  Tensor out = reduce_from_parallel_region(
      linear(y.transpose(1, 2).reshape({b, t, k}), proj_weight), group_);
  return proj_bias.defined() ? add(out, proj_bias) : out;
}

nn::StateDict TensorParallelSelfAttention::full_state_dict() const {
  nn::StateDict d;
  const int64_t k = local_width;
  d.insert("c_attn.weight",
           detail::gather_qkv(qkv_weight, *group_, k, "full_state_dict c_attn.weight"));
  if (qkv_bias.defined()) {
    d.insert("c_attn.bias",
             detail::gather_qkv(qkv_bias, *group_, k, "full_state_dict c_attn.bias"));
  }
  // c_proj's columns: every rank's transposed slice is a block of rows of the transpose.
  d.insert("c_proj.weight", cat(detail::gather_from_every_rank(proj_weight.detach().t(), *group_,
                                                               "full_state_dict c_proj.weight"),
                                0)
                                .t()
                                .contiguous());
  if (proj_bias.defined()) d.insert("c_proj.bias", proj_bias.detach().clone());
  return d;
}

void TensorParallelSelfAttention::load_full_state_dict(const nn::StateDict& full) {
  const int64_t r = group_->rank(), k = local_width;
  auto get = [&](const char* name, const Shape& shape) -> const Tensor& {
    const Tensor* t = full.find(name);
    GRADUS_CHECK(t != nullptr, ValueError,
                 "TensorParallelSelfAttention: load_full_state_dict: no '", name, "'");
    GRADUS_CHECK(t->sizes() == shape, ShapeError, "TensorParallelSelfAttention: '", name,
                 "' must be ", shape_str(shape), ", got ", shape_str(t->sizes()));
    return *t;
  };
  NoGradGuard no_grad;
  qkv_weight.copy_(detail::qkv_rows(get("c_attn.weight", {3 * n_embd, n_embd}), n_embd, r, k));
  proj_weight.copy_(get("c_proj.weight", {n_embd, n_embd}).narrow(1, r * k, k));
  if (qkv_bias.defined())
    qkv_bias.copy_(detail::qkv_rows(get("c_attn.bias", {3 * n_embd}), n_embd, r, k));
  if (proj_bias.defined()) proj_bias.copy_(get("c_proj.bias", {n_embd}));
}

}  // namespace gradus::dist
