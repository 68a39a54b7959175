// Tensor-parallel layers and the differentiable collectives under them (gradus/dist/
// tensor_parallel.h). Each mapping is an autograd::Function whose backward is the transpose
// collective, as in Megatron-LM.
#include "gradus/dist/tensor_parallel.h"

#include <cmath>
#include <map>
#include <set>

#include <sstream>

#include "dist/gather.h"
#include "gradus/dist/tensor_parallel_attention.h"

#include "gradus/autograd.h"
#include "gradus/autograd/function.h"
#include "gradus/nn/layers.h"
#include "gradus/ops.h"
#include "gradus/optim/clip.h"

namespace gradus::dist {

std::vector<Tensor> detail::gather_from_every_rank(const Tensor& x, ProcessGroup& g,
                                                   const std::string& label) {
  const Tensor in = x.contiguous();
  Shape shape = in.sizes();
  shape.insert(shape.begin(), g.size());
  Tensor buf = empty(shape, {in.dtype(), in.device()});
  g.all_gather(buf, in, label)->wait();
  std::vector<Tensor> parts;
  for (int r = 0; r < g.size(); ++r) parts.push_back(buf.select(0, r));
  return parts;
}

Tensor detail::qkv_rows(const Tensor& full, int64_t c, int64_t r, int64_t k) {
  return cat(
      {full.narrow(0, r * k, k), full.narrow(0, c + r * k, k), full.narrow(0, 2 * c + r * k, k)},
      0);
}

Tensor detail::gather_qkv(const Tensor& local, ProcessGroup& g, int64_t k,
                          const std::string& label) {
  const std::vector<Tensor> parts = gather_from_every_rank(local.detach(), g, label);
  std::vector<Tensor> blocks;
  for (int64_t which = 0; which < 3; ++which) {
    for (const Tensor& p : parts) blocks.push_back(p.narrow(0, which * k, k));
  }
  return cat(blocks, 0);
}

namespace {

using autograd::FunctionContext;
using autograd::TensorList;

std::shared_ptr<ProcessGroup> resolve(std::shared_ptr<ProcessGroup> g) {
  return g ? std::move(g) : default_group();
}

Tensor identity(const Tensor& x, ProcessGroup&, const std::string&) {
  return x;
}

Tensor all_reduced(const Tensor& x, ProcessGroup& g, const std::string& label) {
  Tensor t = x.contiguous().clone();
  g.all_reduce(t, ReduceOp::sum, label)->wait();
  return t;
}

// [.., k] on every rank -> [.., size * k], rank r's values at [r*k, (r+1)*k).
Tensor gathered_last_dim(const Tensor& x, ProcessGroup& g, const std::string& label) {
  return cat(detail::gather_from_every_rank(x, g, label), -1);
}

// [k, ..] on every rank -> [size * k, ..] (a 2-D weight split by rows).
Tensor gathered_rows(const Tensor& x, ProcessGroup& g, const std::string& label) {
  return gathered_last_dim(x.t(), g, label).t().contiguous();
}

Tensor my_slice_last_dim(const Tensor& x, ProcessGroup& g, const std::string& label) {
  const int64_t n = x.size(-1);
  GRADUS_CHECK(n % g.size() == 0, ShapeError, label, ": the last dimension (", n,
               ") does not divide evenly over ", g.size(), " ranks");
  const int64_t k = n / g.size();
  return x.narrow(-1, g.rank() * k, k).contiguous();
}

// One mapping: a collective (or identity) forward and its transpose backward.
using Collective = Tensor (*)(const Tensor&, ProcessGroup&, const std::string& label);
struct Mapping : autograd::Function {
  std::string op;
  std::shared_ptr<ProcessGroup> group;
  Collective fwd, bwd;
  Mapping(std::string name, std::shared_ptr<ProcessGroup> g, Collective f, Collective b)
      : op(std::move(name)), group(std::move(g)), fwd(f), bwd(b) {}
  std::string name() const override { return op; }
  TensorList forward(FunctionContext&, const TensorList& in) override {
    return {fwd(in[0], *group, op)};
  }
  TensorList backward(FunctionContext&, const TensorList& grad) override {
    return {bwd(grad[0], *group, op + " backward")};
  }
};

Tensor map(const char* op, Collective fwd, Collective bwd, const Tensor& x,
           std::shared_ptr<ProcessGroup> group) {
  auto fn = std::make_shared<Mapping>(op, resolve(std::move(group)), fwd, bwd);
  return autograd::apply(fn, {x})[0];
}

int64_t split(int64_t features, const ProcessGroup& g, const char* layer, const char* what) {
  GRADUS_CHECK(features > 0 && features % g.size() == 0, ShapeError, layer, ": ", what, " (",
               features, ") must be a positive multiple of the group size (", g.size(), ")");
  return features / g.size();
}

// The full weight and bias nn::Linear would draw (the same random stream on every rank).
std::pair<Tensor, Tensor> full_init(int64_t in, int64_t out, bool bias) {
  nn::Linear full(in, out, bias);
  return {full.weight.detach(), bias ? full.bias.detach() : Tensor()};
}

void copy_into(Tensor dst, const Tensor& src, const char* what) {
  GRADUS_CHECK(src.sizes() == dst.sizes(), ShapeError, what, ": expected shape ",
               shape_str(dst.sizes()), ", got ", shape_str(src.sizes()));
  NoGradGuard no_grad;
  dst.copy_(src);
}

const Tensor& entry(const nn::StateDict& d, const std::string& key, const char* layer) {
  const Tensor* t = d.find(key);
  GRADUS_CHECK(t != nullptr, ValueError, layer, ": load_full_state_dict: no '", key, "'");
  return *t;
}

// The full weight of a full state dict, checked to be [out, in].
const Tensor& full_weight(const nn::StateDict& d, int64_t out, int64_t in, const char* layer) {
  const Tensor& w = entry(d, "weight", layer);
  GRADUS_CHECK(w.dim() == 2 && w.size(0) == out && w.size(1) == in, ShapeError, layer,
               ": load_full_state_dict: weight must be [", out, ", ", in, "], got ",
               shape_str(w.sizes()));
  return w;
}

}  // namespace

Tensor copy_to_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  return map("copy_to_parallel_region", identity, all_reduced, x, std::move(group));
}
Tensor reduce_from_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  return map("reduce_from_parallel_region", all_reduced, identity, x, std::move(group));
}
Tensor gather_from_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  return map("gather_from_parallel_region", gathered_last_dim, my_slice_last_dim, x,
             std::move(group));
}
Tensor scatter_to_parallel_region(const Tensor& x, std::shared_ptr<ProcessGroup> group) {
  return map("scatter_to_parallel_region", my_slice_last_dim, gathered_last_dim, x,
             std::move(group));
}

// ------------------------------------------------------------------------ ColumnParallelLinear
ColumnParallelLinear::ColumnParallelLinear(int64_t in, int64_t out, bool with_bias, bool gather,
                                           std::shared_ptr<ProcessGroup> group)
    : in_features(in), out_features(out), gather_output(gather), group_(resolve(std::move(group))) {
  local_out = split(out, *group_, "ColumnParallelLinear", "out_features");
  auto [w, b] = full_init(in, out, with_bias);
  const int64_t r = group_->rank();
  weight = register_parameter("weight", w.narrow(0, r * local_out, local_out).contiguous());
  if (with_bias)
    bias = register_parameter("bias", b.narrow(0, r * local_out, local_out).contiguous());
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  const Tensor y = linear(copy_to_parallel_region(x, group_), weight, bias);
  return gather_output ? gather_from_parallel_region(y, group_) : y;
}

std::string ColumnParallelLinear::extra_repr() const {
  std::ostringstream s;
  s << "in_features=" << in_features << ", out_features=" << out_features
    << " (this rank: " << local_out << "), bias=" << (bias.defined() ? "True" : "False")
    << ", gather_output=" << (gather_output ? "True" : "False");
  return s.str();
}

nn::StateDict ColumnParallelLinear::full_state_dict() const {
  nn::StateDict d;
  // Rows are split: gather the transposed slices along their last dim.
  d.insert("weight", gathered_rows(weight.detach(), *group_, "full_state_dict weight"));
  if (bias.defined()) {
    d.insert("bias", gathered_last_dim(bias.detach(), *group_, "full_state_dict bias"));
  }
  return d;
}

void ColumnParallelLinear::load_full_state_dict(const nn::StateDict& full) {
  const int64_t r = group_->rank();
  const Tensor& w = full_weight(full, out_features, in_features, "ColumnParallelLinear");
  copy_into(weight, w.narrow(0, r * local_out, local_out), "ColumnParallelLinear weight");
  if (bias.defined()) {
    copy_into(bias, entry(full, "bias", "ColumnParallelLinear").narrow(0, r * local_out, local_out),
              "ColumnParallelLinear bias");
  }
}

// --------------------------------------------------------------------------- RowParallelLinear
RowParallelLinear::RowParallelLinear(int64_t in, int64_t out, bool with_bias, bool parallel_in,
                                     std::shared_ptr<ProcessGroup> group)
    : in_features(in),
      out_features(out),
      input_is_parallel(parallel_in),
      group_(resolve(std::move(group))) {
  local_in = split(in, *group_, "RowParallelLinear", "in_features");
  auto [w, b] = full_init(in, out, with_bias);
  weight =
      register_parameter("weight", w.narrow(1, group_->rank() * local_in, local_in).contiguous());
  if (with_bias) bias = register_parameter("bias", b.contiguous());
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  const Tensor mine = input_is_parallel ? x : scatter_to_parallel_region(x, group_);
  GRADUS_CHECK(mine.size(-1) == local_in, ShapeError, "RowParallelLinear: expected ", local_in,
               " input features on this rank, got input ", shape_str(x.sizes()));
  const Tensor y = reduce_from_parallel_region(linear(mine, weight), group_);
  return bias.defined() ? add(y, bias) : y;
}

std::string RowParallelLinear::extra_repr() const {
  std::ostringstream s;
  s << "in_features=" << in_features << " (this rank: " << local_in
    << "), out_features=" << out_features << ", bias=" << (bias.defined() ? "True" : "False")
    << ", input_is_parallel=" << (input_is_parallel ? "True" : "False");
  return s.str();
}

nn::StateDict RowParallelLinear::full_state_dict() const {
  nn::StateDict d;
  d.insert("weight", gathered_last_dim(weight.detach(), *group_, "full_state_dict weight"));
  if (bias.defined()) d.insert("bias", bias.detach().clone());
  return d;
}

void RowParallelLinear::load_full_state_dict(const nn::StateDict& full) {
  const Tensor& w = full_weight(full, out_features, in_features, "RowParallelLinear");
  copy_into(weight, w.narrow(1, group_->rank() * local_in, local_in), "RowParallelLinear weight");
  if (bias.defined())
    copy_into(bias, entry(full, "bias", "RowParallelLinear"), "RowParallelLinear bias");
}

// --------------------------------------------------------------------------- TensorParallelMLP
TensorParallelMLP::TensorParallelMLP(int64_t in, int64_t hidden, int64_t out,
                                     const std::string& act, std::shared_ptr<ProcessGroup> group)
    : activation(act) {
  GRADUS_CHECK(act == "relu" || act == "gelu" || act == "tanh", ValueError,
               "TensorParallelMLP: activation must be relu, gelu or tanh, got '", act, "'");
  group = resolve(std::move(group));
  // Registered as children "0" and "2" (the activation is "1" in nn::MLP and has no state).
  up = register_module("0", std::make_shared<ColumnParallelLinear>(in, hidden, true, false, group));
  down = register_module("2", std::make_shared<RowParallelLinear>(hidden, out, true, true, group));
}

Tensor TensorParallelMLP::forward(const Tensor& x) {
  const Tensor h = (*up)(x);
  const Tensor a = activation == "relu" ? relu(h) : activation == "gelu" ? gelu(h) : tanh(h);
  return (*down)(a);
}

nn::StateDict TensorParallelMLP::full_state_dict() const {
  nn::StateDict d;
  for (const auto& [name, t] : up->full_state_dict()) d.insert("0." + name, t);
  for (const auto& [name, t] : down->full_state_dict()) d.insert("2." + name, t);
  return d;
}

// ----------------------------------------------------------------------- VocabParallelEmbedding
VocabParallelEmbedding::VocabParallelEmbedding(int64_t num, int64_t dim,
                                               std::shared_ptr<ProcessGroup> group)
    : num_embeddings(num), embedding_dim(dim), group_(resolve(std::move(group))) {
  local_rows = split(num, *group_, "VocabParallelEmbedding", "num_embeddings");
  first_row = group_->rank() * local_rows;
  nn::Embedding full(num, dim);  // the one-device draw; this rank keeps its rows
  weight = register_parameter("weight",
                              full.weight.detach().narrow(0, first_row, local_rows).contiguous());
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  const Tensor mine = logical_and(ge(ids, static_cast<double>(first_row)),
                                  lt(ids, static_cast<double>(first_row + local_rows)));
  const Tensor mine_i = mine.to(ids.dtype());
  // Ids of other ranks look up row 0 and are zeroed after.
  const Tensor local = mul(sub(ids, full_like(ids, static_cast<double>(first_row))), mine_i);
  const Tensor partial = mul(embedding(weight, local), mine.to(weight.dtype()).unsqueeze(-1));
  return reduce_from_parallel_region(partial, group_);
}

nn::StateDict VocabParallelEmbedding::full_state_dict() const {
  nn::StateDict d;
  d.insert("weight", gathered_rows(weight.detach(), *group_, "full_state_dict weight"));
  return d;
}

VocabParallelHead::VocabParallelHead(const VocabParallelEmbedding& embedding)
    : group_(embedding.group_ptr()) {
  weight = register_parameter("weight", embedding.weight, embedding.weight.requires_grad());
}

Tensor VocabParallelHead::forward(const Tensor& x) {
  return linear(copy_to_parallel_region(x, group_), weight);
}

// -------------------------------------------------------------- vocab_parallel_cross_entropy
namespace {

struct VocabParallelCrossEntropy : autograd::Function {
  std::shared_ptr<ProcessGroup> group;
  explicit VocabParallelCrossEntropy(std::shared_ptr<ProcessGroup> g) : group(std::move(g)) {}
  std::string name() const override { return "vocab_parallel_cross_entropy"; }

  TensorList forward(FunctionContext& ctx, const TensorList& in) override {
    const Tensor& logits = in[0];
    const Tensor& target = in[1];
    GRADUS_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
                 ShapeError,
                 "vocab_parallel_cross_entropy: expected logits [N, C/size] and target "
                 "[N], got ",
                 shape_str(logits.sizes()), " and ", shape_str(target.sizes()));
    const int64_t k = logits.size(1), first = group->rank() * k;
    // max over all classes (for a stable exp), then the global sum of exponentials.
    Tensor m = amax(logits, {1}).contiguous();
    group->all_reduce(m, ReduceOp::max, "vocab_parallel_cross_entropy max")->wait();
    const Tensor e = exp(sub(logits, m.unsqueeze(1)));
    Tensor s = sum(e, {1}).contiguous();
    group->all_reduce(s, ReduceOp::sum, "vocab_parallel_cross_entropy sum")->wait();
    // The target's (shifted) logit, from the rank that holds it.
    const Tensor mine = logical_and(ge(target, static_cast<double>(first)),
                                    lt(target, static_cast<double>(first + k)));
    const Tensor local =
        mul(sub(target, full_like(target, static_cast<double>(first))), mine.to(target.dtype()));
    const Tensor shifted = sub(logits, m.unsqueeze(1));
    Tensor picked = mul(gather(shifted, 1, local.unsqueeze(1)).squeeze(1), mine.to(logits.dtype()))
                        .contiguous();
    group->all_reduce(picked, ReduceOp::sum, "vocab_parallel_cross_entropy target")->wait();
    const Tensor loss = mean(sub(log(s), picked));
    ctx.save_for_backward({div(e, s.unsqueeze(1)), local, mine});
    return {loss};
  }

  // d loss / d logits = (softmax - one_hot(target)) / N, on this rank's classes.
  TensorList backward(FunctionContext& ctx, const TensorList& grad) override {
    const TensorList saved = ctx.saved_tensors();
    const Tensor& softmax = saved[0];
    const int64_t n = softmax.size(0), k = softmax.size(1);
    const Tensor hit =
        mul(one_hot(saved[1], k).to(softmax.dtype()), saved[2].to(softmax.dtype()).unsqueeze(1));
    return {mul(sub(softmax, hit), div(grad[0], static_cast<double>(std::max<int64_t>(n, 1)))),
            Tensor()};
  }
};

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& target,
                                    std::shared_ptr<ProcessGroup> group) {
  auto fn = std::make_shared<VocabParallelCrossEntropy>(resolve(std::move(group)));
  return autograd::apply(fn, {logits_shard, target})[0];
}

bool ModelParallel::split() const {
  return (tensor != nullptr && tensor->tensor_group().size() > 1) ||
         (stages != nullptr && stages->size() > 1);
}

void clip_grad_norm_model_parallel(const std::vector<Tensor>& params, double max_norm,
                                   const ModelParallel& split) {
  if (!split.split()) {
    optim::clip_grad_norm(params, max_norm);
    return;
  }
  const bool tensor = split.tensor != nullptr && split.tensor->tensor_group().size() > 1;
  Tensor shards, replicated;  // sums of squares (f64), where the gradients are
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    const Tensor squares = sum(square(g.to(DType::f64)));
    Tensor& into = tensor && split.tensor->is_shard(p) ? shards : replicated;
    into = into.defined() ? add(into, squares) : squares;
  }
  auto on_host = [](const Tensor& t) {
    return t.defined() ? t.to(Device::cpu()).reshape({1}).contiguous()
                       : zeros({1}, {.dtype = DType::f64});
  };
  // (Every rank of a group all-reduces, with or without gradients of its own.)
  Tensor total = on_host(shards);
  if (tensor) {
    split.tensor->tensor_group()
        .all_reduce(total, ReduceOp::sum, "tensor-parallel gradient norm")
        ->wait();
  }
  total = add(total, on_host(replicated)).contiguous();
  if (split.stages != nullptr && split.stages->size() > 1) {
    split.stages->all_reduce(total, ReduceOp::sum, "pipeline gradient norm")->wait();
  }
  const double norm = std::sqrt(total.item());
  GRADUS_CHECK(std::isfinite(norm), ValueError,
               "clip_grad_norm_model_parallel: the gradient norm is ", norm,
               ": clipping cannot scale it");
  const double scale = max_norm / (norm + 1e-6);
  if (scale < 1) {
    NoGradGuard no_grad;
    for (Tensor g : grads) g.mul_(scale);
  }
}

// ------------------------------------------------------------------ TensorParallelLayers
TensorParallelLayers::TensorParallelLayers(std::shared_ptr<nn::Module> model,
                                           std::shared_ptr<ProcessGroup> group)
    : model_(std::move(model)), group_(resolve(std::move(group))) {
  GRADUS_CHECK(model_ != nullptr, ValueError, "TensorParallelLayers: the model is null");
}

TensorParallelLayers::TensorParallelLayers(std::shared_ptr<nn::Module> part,
                                           const TensorParallelModule& whole)
    : model_(std::move(part)), whole_(&whole) {
  GRADUS_CHECK(model_ != nullptr, ValueError, "TensorParallelLayers: the model is null");
}

ProcessGroup& TensorParallelLayers::tensor_group() const {
  return whole_ != nullptr ? whole_->tensor_group() : *group_;
}

int TensorParallelLayers::split_dim(const Tensor& p) const {
  for (const auto& [name, m] : model_->named_modules()) {
    if (auto* column = dynamic_cast<const ColumnParallelLinear*>(m.get())) {
      if (p.same(column->weight) || (column->bias.defined() && p.same(column->bias))) {
        return 0;
      }
    } else if (auto* row = dynamic_cast<const RowParallelLinear*>(m.get())) {
      if (p.same(row->weight)) return 1;
    } else if (auto* embedding = dynamic_cast<const VocabParallelEmbedding*>(m.get())) {
      if (p.same(embedding->weight)) return 0;
    }
  }
  return -1;
}

bool TensorParallelLayers::is_shard(const Tensor& p) const {
  return whole_ != nullptr ? whole_->is_shard(p) : split_dim(p) >= 0;
}

Tensor TensorParallelLayers::gather_shards(const Tensor& p, const Tensor& local) const {
  if (whole_ != nullptr) return whole_->gather_shards(p, local);
  const int dim = split_dim(p);
  if (dim < 0) return local;
  const int size = group_->size();
  // All-gathered along the rows (the collective's layout), then arranged along `dim`.
  const Tensor moved = local.detach().transpose(0, dim).contiguous();
  Shape gathered = moved.sizes();
  gathered[0] *= size;
  Tensor all = empty(gathered, {.dtype = moved.dtype(), .device = moved.device()});
  group_->all_gather(all, moved, "tensor-parallel shards")->wait();
  return all.transpose(0, dim).contiguous();
}

Tensor TensorParallelLayers::take_shard(const Tensor& p, const Tensor& full) const {
  if (whole_ != nullptr) return whole_->take_shard(p, full);
  const int dim = split_dim(p);
  if (dim < 0) return full;
  const int64_t part = full.size(dim) / group_->size();
  return full.narrow(dim, part * group_->rank(), part).contiguous();
}

namespace {
// The split attention layers of a model, with their prefixes ("0.h.1.attn."): their one-process
// names and q/k/v layout differ from their parameters', so they convert themselves.
std::vector<std::pair<std::string, TensorParallelSelfAttention*>> attention_layers(
    nn::Module& model) {
  std::vector<std::pair<std::string, TensorParallelSelfAttention*>> found;
  for (const auto& [name, m] : model.named_modules()) {
    if (auto* attn = dynamic_cast<TensorParallelSelfAttention*>(m.get())) {
      found.emplace_back(name.empty() ? "" : name + ".", attn);
    }
  }
  return found;
}
}  // namespace

nn::StateDict TensorParallelLayers::full_state_dict() const {
  nn::StateDict full;
  std::set<const TensorImpl*> converted;
  for (const auto& [prefix, attn] : attention_layers(*model_)) {
    for (const auto& [name, t] : attn->full_state_dict()) full.insert(prefix + name, t);
    for (const Tensor& p : attn->parameters()) converted.insert(p.impl());
  }
  // Every name of the state dict, as one process's has them: a tied weight under each of its
  // names (gathered once).
  std::map<const TensorImpl*, Tensor> gathered;
  std::set<const TensorImpl*> parameters;
  for (const Tensor& p : model_->parameters()) parameters.insert(p.impl());
  for (const auto& [name, t] : model_->state_dict()) {
    if (converted.count(t.impl()) != 0) continue;
    if (parameters.count(t.impl()) == 0) {
      full.insert(name, t.detach());  // a buffer
      continue;
    }
    auto [it, fresh] = gathered.emplace(t.impl(), Tensor());
    if (fresh) it->second = gather_shards(t, t);
    full.insert(name, it->second);
  }
  return full;
}

void TensorParallelLayers::load_full_state_dict(const nn::StateDict& full) {
  std::set<const TensorImpl*> converted;
  for (const auto& [prefix, attn] : attention_layers(*model_)) {
    nn::StateDict part;
    for (const auto& [name, t] : full) {
      if (name.rfind(prefix, 0) == 0) part.insert(name.substr(prefix.size()), t);
    }
    attn->load_full_state_dict(part);
    for (const Tensor& p : attn->parameters()) converted.insert(p.impl());
  }
  NoGradGuard no_grad;
  auto assign = [&](const std::string& name, Tensor into, const Tensor& value) {
    GRADUS_CHECK(value.sizes() == into.sizes(), ShapeError,
                 "TensorParallelLayers: load_full_state_dict: '", name, "' must be ",
                 shape_str(into.sizes()), " here, got ", shape_str(value.sizes()));
    into.copy_(value.to(into.device()).to(into.dtype()));
  };
  for (const auto& [name, p] : model_->named_parameters()) {
    if (converted.count(p.impl()) != 0) continue;
    const Tensor* value = full.find(name);
    GRADUS_CHECK(value != nullptr, ValueError, "TensorParallelLayers: load_full_state_dict: no '",
                 name, "'");
    assign(name, p, take_shard(p, *value));
  }
  for (const auto& [name, b] : model_->named_buffers()) {
    const Tensor* value = full.find(name);
    GRADUS_CHECK(value != nullptr, ValueError, "TensorParallelLayers: load_full_state_dict: no '",
                 name, "'");
    assign(name, b, *value);
  }
}

}  // namespace gradus::dist
