// DistributedDataParallel against a one-process reference: N ranks with per-rank batch B/N end
// with the parameters one process reaches by averaging the losses of the N shards of batch B
// (for models without BatchNorm: the plain batch-B loss). float64, so the only differences are
// summation order: 1e-12 relative (Adam amplifies it: equivalence_tolerance).
#include "dist/data_parallel_util.h"

namespace gradus::testing {
namespace {

using dist::DistributedDataParallel;

class DDP : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  std::shared_ptr<dist::ProcessGroup> pg = dist::default_group();
};

TEST_P(DDP, MatchesOneProcessOnTheWholeBatch) {
  const auto& [model_name, opt_name] = GetParam();
  const uint64_t seed = shared_seed();
  const int size = pg->size(), rank = pg->rank();
  const int64_t per_rank = 4, steps = 4;
  const Shape x_shape =
      model_name == "mlp" ? Shape{per_rank * size, 64} : Shape{per_rank * size, 1, 8, 8};

  // Replicas start different: DDP must broadcast rank 0's parameters.
  auto local = build(model_name, seed + static_cast<uint64_t>(rank));
  auto ddp = std::make_shared<DistributedDataParallel>(local);
  auto opt = make_opt(opt_name, *local);
  auto ref = build(model_name, seed);  // rank 0's initialisation
  auto ref_opt = make_opt(opt_name, *ref);

  for (int64_t s = 0; s < steps; ++s) {
    const Batch batch = make_batch(seed + 100 + static_cast<uint64_t>(s), x_shape, 5);
    const Batch mine = shard(batch, rank, size);
    opt->zero_grad();
    cross_entropy((*ddp)(mine.x), mine.y).backward();
    opt->step();

    reference_step(*ref, *ref_opt, batch, size);
  }
  const double tol = equivalence_tolerance(model_name, opt_name);
  EXPECT_LT(params_diff(*local, *ref), tol) << model_name << " " << opt_name << " seed " << seed;
  EXPECT_EQ(ddp->stats().backward_passes, steps);

  if (model_name == "mlp") {
    // Without BatchNorm the shard average is the plain whole-batch loss.
    auto plain = build(model_name, seed);
    auto plain_opt = make_opt(opt_name, *plain);
    for (int64_t s = 0; s < steps; ++s) {
      const Batch batch = make_batch(seed + 100 + static_cast<uint64_t>(s), x_shape, 5);
      plain_opt->zero_grad();
      cross_entropy((*plain)(batch.x), batch.y).backward();
      plain_opt->step();
    }
    EXPECT_LT(params_diff(*local, *plain), tol);
  } else {
    // BatchNorm buffers: broadcast from rank 0 before each forward, so every rank holds rank
    // 0's running statistics at the start of a forward: after a forward on the same input
    // everywhere, they are equal (they differed before it, each rank's from its own shards).
    (*ddp)(make_batch(seed + 7, x_shape, 5).x);
    for (const Tensor& b : local->buffers()) {
      if (b.dtype() != DType::f64) continue;
      Tensor hi = b.clone(), lo = b.clone();
      dist::wait_all(
          {pg->all_reduce(hi, dist::ReduceOp::max), pg->all_reduce(lo, dist::ReduceOp::min)});
      EXPECT_EQ(max_rel_diff(hi, lo), 0.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ModelsAndOptimizers, DDP,
                         ::testing::Combine(::testing::Values("mlp", "cnn"),
                                            ::testing::Values("sgd", "adam")),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

TEST(DDPAccumulation, NoSyncOverTwoMicroBatchesEqualsOneBatchOfTwiceTheSize) {
  auto pg = dist::default_group();
  const uint64_t seed = shared_seed();
  const int size = pg->size(), rank = pg->rank();
  const int64_t micro = 3;
  auto local = build("mlp", seed);
  auto ddp = std::make_shared<DistributedDataParallel>(local);
  optim::SGD opt(local->parameters(), {.lr = 0.1, .momentum = 0.5});
  auto ref = build("mlp", seed);
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1, .momentum = 0.5});

  for (int step = 0; step < 3; ++step) {
    // Rank r's two micro-batches are rows [2r*micro, (2r+2)*micro) of the world batch.
    const Batch batch =
        make_batch(seed + 50 + static_cast<uint64_t>(step), {2 * micro * size, 64}, 5);
    const Batch mine = shard(batch, rank, size);
    const Batch first{mine.x.slice(0, 0, micro), mine.y.slice(0, 0, micro)};
    const Batch second{mine.x.slice(0, micro, 2 * micro), mine.y.slice(0, micro, 2 * micro)};
    opt.zero_grad();
    const int64_t before = ddp->stats().backward_passes;
    {
      auto guard = ddp->no_sync();
      mul(cross_entropy((*ddp)(first.x), first.y), 0.5).backward();
    }
    EXPECT_EQ(ddp->stats().backward_passes, before);  // nothing was communicated
    mul(cross_entropy((*ddp)(second.x), second.y), 0.5).backward();
    EXPECT_EQ(ddp->stats().backward_passes, before + 1);
    opt.step();

    ref_opt.zero_grad();
    cross_entropy((*ref)(batch.x), batch.y).backward();
    ref_opt.step();
  }
  EXPECT_LT(params_diff(*local, *ref), 1e-12) << "seed " << seed;
}

// A model whose second head is used only when asked.
class TwoHeads : public nn::Module {
 public:
  TwoHeads() {
    a = register_module("a", std::make_shared<nn::Linear>(6, 3));
    b = register_module("b", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override { return use_b ? add((*a)(x), (*b)(x)) : (*a)(x); }
  std::shared_ptr<nn::Linear> a, b;
  bool use_b = false;
};

// DDP with activation checkpointing: the recomputation's nested backward pass fires the
// parameters' hooks, and DDP's end-of-backward wait must still come at the end of the whole
// backward. Small buckets, so several are launched from inside the nested passes. The result must
// equal DDP without checkpointing bit for bit.
TEST(DDPCheckpointing, SegmentsGiveTheSameTrainingAsWithout) {
  const uint64_t seed = shared_seed();
  const int size = dist::world_size(), rank = dist::rank();
  auto run = [&](int64_t every) {
    auto model = build("mlp", seed);
    std::dynamic_pointer_cast<nn::Sequential>(model)->checkpoint_every(every);
    auto ddp = std::make_shared<dist::DistributedDataParallel>(
        model, dist::DDPOptions{.bucket_cap_mb = 0.001, .first_bucket_cap_mb = 0.001});
    auto opt = make_opt("adam", *model);
    for (int64_t s = 0; s < 3; ++s) {
      const Batch batch = make_batch(seed + 50 + static_cast<uint64_t>(s), {4 * size, 64}, 5);
      const Batch mine = shard(batch, rank, size);
      opt->zero_grad();
      cross_entropy((*ddp)(mine.x), mine.y).backward();
      opt->step();
    }
    EXPECT_EQ(ddp->stats().backward_passes, 3);
    return model;
  };
  auto plain = run(0);
  auto checkpointed = run(1);
  EXPECT_EQ(params_diff(*checkpointed, *plain), 0.0) << "seed " << seed;
}

TEST(DDPUnusedParameters, AreNamedUnlessAllowed) {
  auto pg = dist::default_group();
  const uint64_t seed = shared_seed();
  manual_seed(seed);
  auto model = std::make_shared<TwoHeads>();
  model->to(DType::f64);
  DistributedDataParallel ddp(model);
  const Tensor x = random_tensor({4, 6}, seed, -1, 1, DType::f64);
  try {
    (ddp)(x).sum().backward();
    FAIL() << "an unused parameter was not reported";
  } catch (const dist::DistError& e) {
    EXPECT_NE(std::string(e.what()).find("b.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("find_unused_parameters"), std::string::npos);
  }

  manual_seed(seed);
  auto model2 = std::make_shared<TwoHeads>();
  model2->to(DType::f64);
  DistributedDataParallel ddp2(model2, {.find_unused_parameters = true});
  ddp2(x).sum().backward();
  // The used head's gradient is averaged (the same x on every rank: equal to the local one).
  const Tensor expected = matmul(ones({4, 3}, {.dtype = DType::f64}).t(), x);
  EXPECT_TRUE(all_close(model2->a->weight.grad(), expected, 1e-12, 1e-12));
  EXPECT_EQ(max(abs(model2->b->weight.grad())).item(), 0.0);
}

TEST(DDPBuckets, ReverseOrderWithASmallFirstBucket) {
  manual_seed(1);
  auto mlp = std::make_shared<nn::MLP>(std::vector<int64_t>{256, 512, 512, 10});
  // 512x512 f32 = 1 MiB: with a 0.5 MiB first bucket and 2 MiB after, the last layer's small
  // tensors come first.
  DistributedDataParallel ddp(mlp, {.bucket_cap_mb = 2.0, .first_bucket_cap_mb = 0.5});
  const auto buckets = ddp.bucket_parameter_names();
  ASSERT_GE(buckets.size(), 2u);
  // 4.weight (20 KiB) and the biases fit in the first 0.5 MiB; 2.weight (1 MiB) opens the next.
  EXPECT_EQ(buckets[0], (std::vector<std::string>{"4.bias", "4.weight", "2.bias"}));
  EXPECT_EQ(buckets[1].front(), "2.weight");
  size_t total = 0;
  for (const auto& b : buckets) total += b.size();
  EXPECT_EQ(total, mlp->parameters().size());
  EXPECT_EQ(buckets.back().back(), "0.weight");
}

}  // namespace
}  // namespace gradus::testing
