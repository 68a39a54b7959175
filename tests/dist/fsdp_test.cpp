// Fully sharded training (strategies "zero2" and "fsdp", dist::FullyShard) on the GPT, in float64
// at every world size the dist suite runs (1-4 ranks), against one process on the whole batch:
// with SGD-momentum and AdamW, gradient accumulation, clipping and activation checkpointing; what
// a rank holds of the whole parameters during and between steps; and the gathered scope through
// which checkpoints read and write the parameters.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "dist/data_parallel_util.h"
#include "dist/gpt_test_util.h"
#include "gradus/dist/fsdp.h"
#include "gradus/io/safetensors.h"
#include "gradus/nn/gpt.h"
#include "gradus/optim/optim.h"
#include "gradus/train/save_model.h"
#include "gradus/train/strategy.h"

namespace gradus::testing {
namespace {

// Bytes of the model's whole parameters that hold memory now.
uint64_t resident_parameter_bytes(nn::Module& model) {
  std::set<const StorageImpl*> seen;
  uint64_t bytes = 0;
  for (const Tensor& p : model.parameters()) {
    const Storage& s = p.impl()->storage();
    if (s->is_resident() && seen.insert(s.get()).second) bytes += s->nbytes();
  }
  return bytes;
}

uint64_t bytes_of(const std::vector<Tensor>& tensors) {
  uint64_t bytes = 0;
  for (const Tensor& t : tensors) bytes += static_cast<uint64_t>(t.numel()) * t.element_size();
  return bytes;
}

class FullySharded
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, int64_t>> {};

// Three steps of two accumulated micro-batches per rank, the last two clipped, against one process
// stepping on the whole batch.
TEST_P(FullySharded, TrainsTheGPTAsOneProcess) {
  const auto& [mode, opt_name, checkpoint_every] = GetParam();
  const uint64_t seed = shared_seed();
  const int size = dist::world_size(), rank = dist::rank();
  const int64_t rows = 2, micro = 2, t = tiny_gpt().block_size;
  auto model = build_gpt(seed + static_cast<uint64_t>(rank), checkpoint_every);  // rank 0's wins
  auto strategy = train::make_strategy(mode);
  strategy->setup(model, [&](std::vector<Tensor> p) { return gpt_optimizer(opt_name, p); });
  auto ref = build_gpt(seed);
  auto ref_opt = gpt_optimizer(opt_name, ref->parameters());
  amp::GradScaler no_scaling({.enabled = false});
  const int64_t global = rows * micro * size;
  for (int64_t step = 0; step < 3; ++step) {
    const Tensor idx = tokens({global, t}, seed + 10 + static_cast<uint64_t>(step));
    const Tensor targets = tokens({global, t}, seed + 40 + static_cast<uint64_t>(step));
    const double max_norm = step >= 1 ? 0.05 : 0.0;
    strategy->optimizer().zero_grad();
    for (int64_t m = 0; m < micro; ++m) {
      const int64_t first = (rank * micro + m) * rows;
      strategy->set_gradient_sync(m == micro - 1);
      strategy->before_forward();
      const Tensor loss = lm_loss(strategy->module(), idx.slice(0, first, first + rows),
                                  targets.slice(0, first, first + rows));
      mul(loss, 1.0 / static_cast<double>(micro)).backward();
    }
    strategy->step(no_scaling, max_norm);
    ref_opt->zero_grad();
    lm_loss(*ref, idx, targets).backward();
    if (max_norm > 0) {
      const double norm = optim::clip_grad_norm(ref->parameters(), max_norm).item();
      EXPECT_GT(norm, max_norm) << "the clipping did not bite at step " << step;
    }
    ref_opt->step();
  }
  const train::FullParameters whole = strategy->full_parameters();
  const double tol = opt_name == "sgd" ? 1e-11 : 1e-9;
  EXPECT_LT(params_diff(*model, *ref), tol) << mode << " " << opt_name << " seed " << seed;
  // The gathered optimizer state is the one-process optimizer's.
  const optim::OptimizerState full = strategy->optimizer().state_dict();
  const optim::OptimizerState expected = ref_opt->state_dict();
  ASSERT_EQ(full.tensors.size(), expected.tensors.size());
  for (const auto& [k, v] : expected.tensors) {
    ASSERT_TRUE(full.tensors.count(k)) << k;
    EXPECT_TRUE(all_close(full.tensors.at(k), v, 1e-8, 1e-12)) << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Gpt, FullySharded,
                         ::testing::Combine(::testing::Values("zero2", "fsdp"),
                                            ::testing::Values("sgd", "adamw"),
                                            ::testing::Values(0, 2)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param) +
                                  (std::get<2>(info.param) > 0 ? "_checkpointed" : "");
                         });

// Under fsdp a rank holds the whole parameters of the root (embeddings, final norm) and of at most
// two blocks (the running one and the prefetched next) during forward, of none between steps; the
// gathered scope holds them all, and what is written into it reaches the shards. (A world of one's
// shard is the whole model, which it then holds throughout.)
TEST(FullyShard, HoldsTheRunningBlockAndTheNextOnly) {
  const uint64_t seed = shared_seed();
  const int size = dist::world_size(), rank = dist::rank();
  auto model = build_gpt(seed);
  const uint64_t whole_bytes = bytes_of(model->parameters());
  uint64_t root_bytes = whole_bytes,
           block_bytes = bytes_of(model->h->at<nn::Module>(0)->parameters());
  for (const auto& block : *model->h) root_bytes -= bytes_of(block->parameters());
  auto strategy = train::make_strategy("fsdp");
  strategy->setup(model, [](std::vector<Tensor> p) { return gpt_optimizer("adamw", p); });
  const bool sharded = size > 1;
  const uint64_t between_steps = sharded ? 0 : whole_bytes;
  EXPECT_EQ(resident_parameter_bytes(*model), between_steps) << "after setup";
  // (Each flat buffer pads to a multiple of the world size.)
  const uint64_t padding = static_cast<uint64_t>(size) * 8;
  std::vector<uint64_t> during;
  for (const auto& block : *model->h) {
    block->register_forward_pre_hook([&](nn::Module&, const std::vector<Tensor>&) {
      during.push_back(resident_parameter_bytes(*model));
      return std::optional<std::vector<Tensor>>();
    });
  }
  amp::GradScaler no_scaling({.enabled = false});
  for (int64_t step = 0; step < 2; ++step) {
    const Tensor idx = tokens({2, 8}, seed + 7 + static_cast<uint64_t>(rank * 10 + step));
    strategy->optimizer().zero_grad();
    lm_loss(strategy->module(), idx, idx).backward();
    strategy->step(no_scaling);
    EXPECT_EQ(resident_parameter_bytes(*model), between_steps) << "between steps";
  }
  ASSERT_EQ(during.size(), 6u);  // 3 blocks, 2 steps
  for (size_t i = 0; i < during.size(); ++i) {
    if (!sharded) {
      EXPECT_EQ(during[i], whole_bytes);
      continue;
    }
    EXPECT_GE(during[i], root_bytes + block_bytes) << "block " << i % 3;
    EXPECT_LE(during[i], root_bytes + 2 * block_bytes + 3 * padding) << "block " << i % 3;
  }
  if (sharded) {
    EXPECT_LT(during.back(), whole_bytes) << "the last block runs with the others freed";
  }
  const train::MemoryFootprint held = strategy->memory_footprint();
  EXPECT_LE(held.parameter_bytes, whole_bytes / static_cast<uint64_t>(size) + 4 * padding);

  // A released parameter refuses to be read, naming why.
  const Tensor block_weight = model->h->at<nn::Module>(2)->parameters()[0];
  if (sharded) {
    EXPECT_THROW(
        {
          try {
            (void)sum(block_weight).item();
          } catch (const ValueError& e) {
            EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
            throw;
          }
        },
        ValueError);
  }

  // Written while gathered (a checkpoint's load), kept in the shards.
  auto other = build_gpt(seed + 1000);
  {
    const train::FullParameters whole = strategy->full_parameters();
    EXPECT_GE(resident_parameter_bytes(*model), whole_bytes);
    model->load_state_dict(other->state_dict());
  }
  EXPECT_EQ(resident_parameter_bytes(*model), between_steps);
  const train::FullParameters whole = strategy->full_parameters();
  EXPECT_LT(params_diff(*model, *other), 1e-15);
}

// A user's own units (StrategyOptions::shard_units): an MLP whose first two Linears form one unit
// and whose last is another trains under fsdp as one process does, and the plan puts each
// parameter in its unit (the rest in the root).
TEST(FullyShard, TrainsWithTheUnitsAUserChooses) {
  const uint64_t seed = shared_seed();
  const int size = dist::world_size(), rank = dist::rank();
  auto make = [](uint64_t s) {
    manual_seed(s);
    auto first =
        std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
            std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::Tanh>(),
            std::make_shared<nn::Linear>(8, 8)});
    auto net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        first, std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(8, 3)});
    net->to(DType::f64);
    return net;
  };
  auto model = make(seed + static_cast<uint64_t>(rank));
  nn::Module* first = model->named_children()[0].second.get();
  nn::Module* last = model->named_children()[2].second.get();
  const dist::ShardUnits plan = dist::plan_shard_units(*model, model->parameters(), {first, last});
  ASSERT_EQ(plan.params.size(), 3u);
  EXPECT_TRUE(plan.params[0].empty());   // the root holds nothing of its own
  EXPECT_EQ(plan.params[1].size(), 4u);  // two Linears' weights and biases
  EXPECT_EQ(plan.params[2].size(), 2u);
  train::StrategyOptions options;
  options.shard_units = {first, last};
  auto strategy = train::make_strategy("fsdp", options);
  strategy->setup(model, [](std::vector<Tensor> p) { return make_opt("adam", std::move(p)); });
  EXPECT_EQ(strategy->parameter_parts().size(), 3u);
  auto ref = make(seed);
  auto ref_opt = make_opt("adam", ref->parameters());
  amp::GradScaler no_scaling({.enabled = false});
  for (int64_t step = 0; step < 3; ++step) {
    const Batch batch = make_batch(seed + 30 + static_cast<uint64_t>(step), {4 * size, 6}, 3);
    strategy->optimizer().zero_grad();
    strategy->before_forward();
    const Batch mine = shard(batch, rank, size);
    cross_entropy(strategy->module()(mine.x), mine.y).backward();
    strategy->step(no_scaling);
    reference_step(*ref, *ref_opt, batch, size);
  }
  const train::FullParameters whole = strategy->full_parameters();
  EXPECT_LT(params_diff(*model, *ref), 1e-10) << "seed " << seed;
}

// train::save_model under fsdp: the file holds the whole model under its state_dict names,
// bitwise what the gathered parameters are, written while one part at a time was gathered (each
// part's scope holds that part's whole parameters only); a non-finite weight stops it, naming the
// tensor, with no file left; a path that cannot be created fails on every rank.
TEST(FullyShard, SavesTheWholeModelOnePartAtATime) {
  const uint64_t seed = shared_seed();
  const int size = dist::world_size();
  auto model = build_gpt(seed);
  auto strategy = train::make_strategy("fsdp");
  strategy->setup(model, [](std::vector<Tensor> p) { return gpt_optimizer("sgd", p); });
  const std::vector<std::vector<Tensor>> parts = strategy->parameter_parts();
  ASSERT_EQ(parts.size(), 1u + tiny_gpt().n_layer);  // the root, then each block
  for (size_t k = 0; k < parts.size(); ++k) {
    const train::FullParameters part = strategy->full_parameters(k);
    const uint64_t held = resident_parameter_bytes(*model);
    if (size == 1) {
      EXPECT_EQ(held, bytes_of(model->parameters())) << "part " << k;
    } else {
      EXPECT_GE(held, bytes_of(parts[k])) << "part " << k;
      EXPECT_LE(held, bytes_of(parts[k]) + static_cast<uint64_t>(size) * 8) << "part " << k;
    }
  }
  // (The seed is the same on every rank; only data rank 0 writes.)
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("gradus_fsdp_save_" + std::to_string(seed)))
          .string();
  if (dist::rank() == 0) std::filesystem::create_directories(dir);
  const std::string path = dir + "/fsdp_model.safetensors";
  train::save_model(*strategy, path, {{"format", "pt"}});
  dist::default_group()->barrier()->wait();
  const std::map<std::string, Tensor> file = io::load_safetensors(path);
  {
    const train::FullParameters whole = strategy->full_parameters();
    const nn::StateDict state = model->state_dict();
    ASSERT_EQ(file.size(), state.size());
    for (const auto& [name, t] : state) {
      ASSERT_TRUE(file.count(name)) << name;
      EXPECT_TRUE(all_close(file.at(name), t.to(Device::cpu()), 0, 0)) << name;  // bitwise
    }
    // A diverged weight (written inside the gathered scope reaches the shards).
    model->h->at<nn::Module>(1)->parameters()[0].detach().fill_(std::nan(""));
  }
  const std::string bad_path = dir + "/fsdp_nan.safetensors";
  if (dist::rank() == 0) {
    EXPECT_THROW(
        {
          try {
            train::save_model(*strategy, bad_path);
          } catch (const ValueError& e) {
            EXPECT_NE(std::string(e.what()).find("transformer.h.1."), std::string::npos)
                << e.what();
            throw;
          }
        },
        ValueError);
    EXPECT_FALSE(std::filesystem::exists(bad_path));
  } else {
    train::save_model(*strategy, bad_path);  // (only data rank 0 writes and reports)
  }
  // A path data rank 0 cannot create fails on every rank, before any gather.
  EXPECT_THROW(train::save_model(*strategy, dir + "/no/such/dir/model.safetensors"), IOError);
  dist::default_group()->barrier()->wait();
  if (dist::rank() == 0) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gradus::testing

namespace gradus::testing {
namespace {

// Mixed precision of fsdp's communication (ZeroOptions::gather_dtype, reduce_dtype): with
// parameters gathered in bf16, each step computes with the master weights rounded to bf16 and
// applies the gradient to the float64 masters, as one process does when it rounds a copy of its
// weights for each step; a checkpoint's gather is exact. Gradients reduce-scattered in bf16 end
// within bf16's rounding of the float64 reduction. (A world of one communicates nothing: its
// weights and gradients are never rounded.)
class FullyShardedMixedPrecision : public ::testing::TestWithParam<bool> {};

TEST_P(FullyShardedMixedPrecision, ComputesWithRoundedWeightsAndUpdatesTheMasters) {
  const bool reduce_bf16 = GetParam();
  const uint64_t seed = shared_seed();
  const int size = dist::world_size(), rank = dist::rank();
  const int64_t rows = 2;
  auto model = build_gpt(seed);
  train::StrategyOptions options;
  options.gather_dtype = DType::bf16;
  if (reduce_bf16) options.reduce_dtype = DType::bf16;
  auto strategy = train::make_strategy("fsdp", options);
  strategy->setup(model, [](std::vector<Tensor> p) { return gpt_optimizer("sgd", p); });
  auto master = build_gpt(seed);
  auto rounded = build_gpt(seed);
  auto master_opt = gpt_optimizer("sgd", master->parameters());
  for (int64_t step = 0; step < 3; ++step) {
    const TokenBatch batch = token_batch(rows * size, seed, step);
    strategy_step(*strategy, batch, rank, rows);
    // One process: the step's weights are the masters rounded (when gathered at all), its
    // gradient goes to the masters.
    const std::vector<Tensor> ps = master->parameters(), rs = rounded->parameters();
    {
      NoGradGuard no_grad;
      for (size_t i = 0; i < ps.size(); ++i) {
        Tensor r = rs[i];
        r.copy_(size > 1 ? ps[i].to(DType::bf16).to(DType::f64) : ps[i]);
      }
    }
    rounded->zero_grad();
    lm_loss(*rounded, batch.idx, batch.targets).backward();
    master_opt->zero_grad();
    for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(rs[i].grad().clone());
    master_opt->step();
  }
  const train::FullParameters whole = strategy->full_parameters();
  // bf16 reductions round every gradient and partial sum to 8 bits of mantissa (SGD passes that
  // on linearly); float64 ones only reorder the sum.
  const double tol = reduce_bf16 && size > 1 ? 2e-2 : 1e-11;
  EXPECT_LT(params_diff(*model, *master), tol) << "seed " << seed;
  if (reduce_bf16 && size > 1) {
    EXPECT_GT(params_diff(*model, *master), 1e-9) << "the bf16 reduction changed nothing";
  }
  // The gathered scope holds the masters exactly, not their bf16 rounding.
  double off_bf16 = 0;
  for (const Tensor& p : model->parameters()) {
    off_bf16 = std::max(off_bf16, max_rel_diff(p, p.to(DType::bf16).to(DType::f64)));
  }
  EXPECT_GT(off_bf16, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Gpt, FullyShardedMixedPrecision, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "gather_and_reduce_bf16" : "gather_bf16");
});

// What the dtypes apply to is refused elsewhere, naming it.
TEST(FullyShardedMixedPrecision, IsRefusedWhereNothingIsGatheredOrReduced) {
  train::StrategyOptions gather;
  gather.gather_dtype = DType::bf16;
  EXPECT_THROW(train::make_strategy("ddp", gather), ValueError);
  auto zero2 = train::make_strategy("zero2", gather);
  EXPECT_THROW(
      zero2->setup(build_gpt(1), [](std::vector<Tensor> p) { return gpt_optimizer("sgd", p); }),
      ValueError);
  train::StrategyOptions reduce;
  reduce.reduce_dtype = DType::i64;
  auto fsdp = train::make_strategy("fsdp", reduce);
  EXPECT_THROW(
      fsdp->setup(build_gpt(1), [](std::vector<Tensor> p) { return gpt_optimizer("sgd", p); }),
      ValueError);
}

}  // namespace
}  // namespace gradus::testing
