// Every strategy of the training layer's registry against the same one-process reference: N ranks
// with per-rank batch B/N end where one process ends by averaging the N shard losses of batch B
// ("local" trains each rank alone, so it is checked in a world of one). The strategies start
// from different weights on each rank: setup() must give every rank data rank 0's.
#include "dist/data_parallel_util.h"
#include "gradus/train/strategy.h"

namespace gradus::testing {
namespace {

class Strategy
    : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {
 protected:
  std::shared_ptr<dist::ProcessGroup> pg = dist::default_group();
};

TEST_P(Strategy, MatchesOneProcessOnTheWholeBatch) {
  const auto& [mode, model_name, opt_name] = GetParam();
  const uint64_t seed = shared_seed();
  const int size = pg->size(), rank = pg->rank();
  if (mode == "local" && size > 1) GTEST_SKIP() << "local: each rank trains alone";
  const int64_t per_rank = 4, steps = 4;
  const Shape x_shape =
      model_name == "mlp" ? Shape{per_rank * size, 64} : Shape{per_rank * size, 1, 8, 8};
  // Rank 0 builds the reference's weights; the others start elsewhere.
  auto local = build(model_name, seed + static_cast<uint64_t>(rank));
  const std::unique_ptr<train::Strategy> strategy = train::make_strategy(mode);
  EXPECT_EQ(strategy->name(), mode);
  strategy->setup(local, [&](std::vector<Tensor> p) { return make_opt(opt_name, std::move(p)); });
  optim::Optimizer* opt = &strategy->optimizer();
  amp::GradScaler no_scaling({.enabled = false});
  auto ref = build(model_name, seed);
  auto ref_opt = make_opt(opt_name, *ref);

  // Steps 2 and 3 clip the averaged gradient to a norm below its own (asserted to bite), as one
  // process clips the whole batch's gradient.
  for (int64_t s = 0; s < steps; ++s) {
    const Batch batch = make_batch(seed + 100 + static_cast<uint64_t>(s), x_shape, 5);
    const Batch mine = shard(batch, rank, size);
    const double max_norm = s >= 2 ? 0.05 : 0.0;
    opt->zero_grad();
    strategy->before_forward();
    cross_entropy(strategy->module()(mine.x), mine.y).backward();
    strategy->step(no_scaling, max_norm);
    reference_step(*ref, *ref_opt, batch, size, max_norm);
    if (max_norm > 0) {
      double sq = 0;
      for (const Tensor& p : ref->trainable_parameters()) {
        sq += sum(square(p.grad().to(DType::f64))).item();
      }
      EXPECT_NEAR(std::sqrt(sq), max_norm, 1e-6) << "the clipping did not bite at step " << s;
    }
  }
  const double tol = equivalence_tolerance(model_name, opt_name);
  {
    const train::FullParameters whole = strategy->full_parameters();  // (fsdp: gathered)
    EXPECT_LT(params_diff(*local, *ref), tol)
        << mode << " " << model_name << " " << opt_name << " seed " << seed;
  }

  // What the rank holds between steps, against the model's own sizes: the whole parameters, or
  // under fsdp a 1/size shard of them; a whole gradient (ZeRO-1 its shard besides), or under
  // zero2 and fsdp only the shard; each flat buffer adds at most its padding. The optimizer state
  // is the optimizer's.
  const train::MemoryFootprint held = strategy->memory_footprint();
  uint64_t model_bytes = 0;
  for (const Tensor& p : local->parameters()) {
    model_bytes += static_cast<uint64_t>(p.numel()) * p.element_size();
  }
  const uint64_t s = static_cast<uint64_t>(size);
  // (One flat buffer per unit; a unit holds at least one parameter.)
  const uint64_t padding = static_cast<uint64_t>(local->parameters().size()) * s * 8;
  const int stage = mode == "zero1" ? 1 : mode == "zero2" ? 2 : mode == "fsdp" ? 3 : 0;
  const uint64_t params_held = stage == 3 ? model_bytes / s : model_bytes;
  EXPECT_GE(held.parameter_bytes, params_held) << mode;
  EXPECT_LE(held.parameter_bytes, params_held + padding) << mode;
  const uint64_t grads_held = stage >= 2   ? model_bytes / s
                              : stage == 1 ? model_bytes + model_bytes / s
                                           : model_bytes;
  EXPECT_GE(held.gradient_bytes, grads_held) << mode;
  EXPECT_LE(held.gradient_bytes, grads_held + 2 * padding) << mode;
  EXPECT_EQ(held.optimizer_state_bytes, opt->state_bytes()) << mode;

  if (strategy->caps().sharded_optimizer_state) {
    // Optimizer state per rank: 1/size of the unsharded one (up to padding).
    uint64_t full_bytes = 0;
    for (const auto& [k, t] : ref_opt->state_dict().tensors) {
      full_bytes += static_cast<uint64_t>(t.numel()) * t.element_size();
    }
    EXPECT_LE(opt->state_bytes(), full_bytes / static_cast<uint64_t>(size) + 4 * padding);
    EXPECT_GE(opt->state_bytes() * static_cast<uint64_t>(size), full_bytes);
    // The consolidated state is the unsharded optimizer's.
    const optim::OptimizerState full = opt->state_dict();  // gathered from the shards
    const optim::OptimizerState expected = ref_opt->state_dict();
    ASSERT_EQ(full.tensors.size(), expected.tensors.size());
    for (const auto& [k, t] : expected.tensors) {
      ASSERT_TRUE(full.tensors.count(k)) << k;
      // Absolute floor: the conv biases' Adam moments are rounding noise (see ddp_test).
      EXPECT_TRUE(all_close(full.tensors.at(k), t, 1e-6, 1e-12)) << k;
    }
    for (const auto& [k, v] : expected.scalars) {
      ASSERT_TRUE(full.scalars.count(k)) << k;
      EXPECT_EQ(full.scalars.at(k), v) << k;
    }
    // Round trip into a fresh sharded optimizer: one more step matches the reference's.
    auto again = build(model_name, seed);
    {
      const train::FullParameters whole = strategy->full_parameters();
      again->load_state_dict(local->state_dict());
    }
    dist::ZeroRedundancyOptimizer opt2(
        again->parameters(), [&](std::vector<Tensor> shard) { return make_opt(opt_name, shard); });
    opt2.load_state_dict(full);
    const Batch batch = make_batch(seed + 999, x_shape, 5);
    opt2.zero_grad();
    cross_entropy((*again)(shard(batch, rank, size).x), shard(batch, rank, size).y).backward();
    opt2.step();
    reference_step(*ref, *ref_opt, batch, size);
    EXPECT_LT(params_diff(*again, *ref), tol);
  }
}

std::vector<std::string> registered() {
  std::vector<std::string> names;
  for (const train::StrategyInfo& s : train::strategies()) names.push_back(s.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Registry, Strategy,
                         ::testing::Combine(::testing::ValuesIn(registered()),
                                            ::testing::Values("mlp", "cnn"),
                                            ::testing::Values("sgd", "adam")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" +
                                  std::get<2>(info.param);
                         });

}  // namespace
}  // namespace gradus::testing
