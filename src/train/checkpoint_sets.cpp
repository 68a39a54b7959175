#include "train/checkpoint_sets.h"

#include <cstdio>
#include <map>
#include <random>

#include "gradus/core/random.h"
#include "gradus/ops.h"
#include "train/host_copy.h"

namespace gradus::train::sets {

namespace {

// Rank 0's random id, shared: a shard left by another run (or an earlier try of the same step)
// never passes for one of this set.
std::string agree_on_id(dist::ProcessGroup& group) {
  double mine = 0;
  if (group.rank() == 0) {
    std::random_device device;
    mine = static_cast<double>((static_cast<uint64_t>(device()) << 20) ^ device());  // < 2^52
  }
  Tensor id = tensor({mine}, {1}, {.dtype = DType::f64});
  group.all_reduce(id, dist::ReduceOp::sum, "checkpoint set id")->wait();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id.item()));
  return buf;
}

}  // namespace

SetWrite capture(const dist::ZeroRedundancyOptimizer& optimizer, const nn::Module& model,
                 int64_t step) {
  dist::ProcessGroup& group = optimizer.group();
  SetWrite set;
  set.id = agree_on_id(group);
  set.rank = group.rank();
  set.world = group.size();
  const dist::ZeroRedundancyOptimizer::ShardedState state = optimizer.sharded_state();
  set.index.step = step;
  set.index.optimizer = state.scalars;
  set.index.rng = default_generator().state();

  const std::vector<Tensor> params = optimizer.all_params();
  std::map<const TensorImpl*, size_t> index_of;
  for (size_t i = 0; i < params.size(); ++i) index_of.emplace(params[i].impl(), i);
  std::map<size_t, const dist::ZeroRedundancyOptimizer::OwnedSlice*> slice_of;
  for (const auto& slice : state.slices) slice_of.emplace(slice.param, &slice);

  // The checkpoint names of each parameter's pieces: its model names, its optimizer state's.
  std::vector<std::vector<std::string>> names(params.size());
  // The model under its names (a tied parameter under each of them), the rest whole.
  for (const auto& [name, t] : model.state_dict()) {
    set.model_order.push_back(name);
    auto i = index_of.find(t.impl());
    if (i == index_of.end()) {
      set.index.model.insert(name, t);
      continue;
    }
    const std::string key = "model." + name;
    names[i->second].push_back(key);
    set.sharded.push_back({key, t.dtype(), t.sizes()});
    if (auto s = slice_of.find(i->second); s != slice_of.end()) {
      set.pieces.push_back({key, t.sizes(), s->second->begin, s->second->end, s->second->values});
    }
  }
  // The optimizer's state under one process's numbering.
  for (size_t i = 0; i < params.size(); ++i) {
    auto s = slice_of.find(i);
    for (const auto& [name, dtype] : state.state_dtypes[i]) {
      const std::string key = "optim.state." + std::to_string(i) + "." + name;
      names[i].push_back(key);
      set.sharded.push_back({key, dtype, params[i].sizes()});
      if (s != slice_of.end()) {
        set.pieces.push_back(
            {key, params[i].sizes(), s->second->begin, s->second->end, s->second->state.at(name)});
      }
    }
  }
  for (const auto& ranges : state.ranges_by_rank) {
    io::ShardRanges& shard = set.ranges_by_rank.emplace_back();
    for (const auto& range : ranges) {
      for (const std::string& key : names[range.param]) {
        shard.emplace(key, std::make_pair(range.begin, range.end));
      }
    }
  }
  return set;
}

void copy_to_host(SetWrite& set) {
  std::vector<Tensor> all;
  for (const auto& [name, t] : set.index.model) all.push_back(t);
  for (const io::TensorPiece& p : set.pieces) all.push_back(p.values);
  const std::vector<Tensor> copies = host_copies(all);
  size_t i = 0;
  nn::StateDict model;
  for (const auto& [name, t] : set.index.model) model.insert(name, copies[i++]);
  set.index.model = std::move(model);
  for (io::TensorPiece& p : set.pieces) p.values = copies[i++];
}

}  // namespace gradus::train::sets
