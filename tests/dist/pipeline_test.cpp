// Pipeline parallelism and sub-groups at every world size the dist label runs (1-4): a pipeline
// of world-size stages, GPipe and 1F1B, 1..8 micro-batches (even and uneven), with dropout, gives
// the losses and parameters of one process running the whole batch (float64); 1F1B holds at most
// p - s micro-batches of activations; 2 data x 2 pipeline and 2 data x 2 tensor layouts equal one
// process; bad layouts and batches are refused on every rank.
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "dist/dist_test_util.h"
#include "gradus/dist/layout.h"
#include "gradus/dist/pipeline.h"
#include "gradus/dist/tensor_parallel.h"
#include "gradus/nn/layers.h"
#include "gradus/optim/optim.h"

namespace gradus::testing {
namespace {

constexpr int64_t kIn = 10, kClasses = 5;

// Nine layers (every world size up to 4 gets at least two per stage), two of them dropout.
std::shared_ptr<nn::Sequential> make_model(uint64_t seed, double dropout) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(kIn, 16), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Dropout>(dropout), std::make_shared<nn::Linear>(16, 16),
      std::make_shared<nn::GELU>(), std::make_shared<nn::Dropout>(dropout),
      std::make_shared<nn::Linear>(16, 8), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(8, kClasses)});
  m->to(DType::f64);
  return m;
}

Tensor loss_fn(const Tensor& out, const Tensor& target) {
  return cross_entropy(out, target);
}

Tensor batch_input(uint64_t seed, int64_t rows) {
  return random_tensor({rows, kIn}, seed).to(DType::f64);
}

Tensor batch_target(uint64_t seed, int64_t rows) {
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) t[static_cast<size_t>(i)] = (seed / 7 + 3 * i) % kClasses;
  return from_vector(t, {rows}, {.dtype = DType::i64});
}

struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, Tensor> params;
};

// K steps of SGD with momentum on the whole batch in this process.
TrainRun one_process(uint64_t seed, double dropout, int64_t rows, int steps) {
  auto model = make_model(seed, dropout);
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  manual_seed(seed + 99);
  TrainRun run;
  for (int k = 0; k < steps; ++k) {
    opt.zero_grad();
    Tensor loss = loss_fn((*model)(batch_input(seed + k, rows)), batch_target(seed + k, rows));
    loss.backward();
    opt.step();
    run.losses.push_back(loss.item<double>());
  }
  for (const auto& [name, p] : model->named_parameters()) run.params[name] = p.detach().clone();
  return run;
}

TrainRun pipelined(uint64_t seed, double dropout, int64_t rows, int steps,
                   dist::PipelineOptions opts, std::shared_ptr<dist::ProcessGroup> group = nullptr,
                   dist::PipelineStats* stats = nullptr) {
  dist::Pipeline pipe(make_model(seed, dropout), opts, group);
  // A stage may hold only parameter-free layers (balanced by parameter count on 4 ranks).
  std::optional<optim::SGD> opt;
  if (!pipe.parameters().empty())
    opt.emplace(pipe.parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  manual_seed(seed + 99);
  TrainRun run;
  for (int k = 0; k < steps; ++k) {
    if (opt) opt->zero_grad();
    // Only the first stage reads the input and only the last the target.
    const Tensor x = pipe.is_first() ? batch_input(seed + k, rows) : Tensor();
    const Tensor y = pipe.is_last() ? batch_target(seed + k, rows) : Tensor();
    run.losses.push_back(pipe.train_step(x, y, loss_fn));
    if (opt) opt->step();
  }
  for (const auto& [name, p] : pipe.stage().named_parameters()) run.params[name] = p.detach();
  if (stats != nullptr) *stats = pipe.last_stats();
  return run;
}

// replicas: how many data-parallel copies of the pipeline the world holds.
void expect_same(const TrainRun& pipe, const TrainRun& ref, const std::string& what,
                 int replicas = 1) {
  ASSERT_EQ(pipe.losses.size(), ref.losses.size());
  for (size_t k = 0; k < ref.losses.size(); ++k) {
    EXPECT_NEAR(pipe.losses[k], ref.losses[k], 1e-12 * std::abs(ref.losses[k])) << what;
  }
  // Between them the stages hold each of the model's 8 parameters once.
  Tensor held = from_vector(std::vector<int64_t>{static_cast<int64_t>(pipe.params.size())}, {1},
                            {.dtype = DType::i64});
  dist::default_group()->all_reduce(held)->wait();
  EXPECT_EQ(held.item<int64_t>(), replicas * static_cast<int64_t>(ref.params.size())) << what;
  for (const auto& [name, p] : pipe.params) {
    ASSERT_TRUE(ref.params.count(name)) << what << ": " << name;
    EXPECT_TRUE(all_close(p, ref.params.at(name), 1e-12, 1e-13)) << what << ": " << name;
  }
}

TEST(Pipeline, EqualsOneProcessForEveryScheduleAndMicroBatching) {
  const uint64_t seed = shared_seed();
  for (double dropout : {0.0, 0.3}) {
    for (int m : {1, 3, 8}) {
      const int64_t rows = m == 3 ? 10 : 8;  // 10 rows in 3 micro-batches: 4, 3, 3
      const TrainRun ref = one_process(seed, dropout, rows, 3);
      for (auto schedule : {dist::PipelineSchedule::gpipe, dist::PipelineSchedule::one_f_one_b}) {
        const TrainRun run =
            pipelined(seed, dropout, rows, 3, {.micro_batches = m, .schedule = schedule});
        expect_same(run, ref,
                    std::string(dist::schedule_name(schedule)) + " m=" + std::to_string(m) +
                        " dropout=" + std::to_string(dropout));
      }
    }
  }
}

TEST(Pipeline, OneFOneBBoundsTheActivationsHeld) {
  const uint64_t seed = shared_seed();
  const int p = dist::world_size(), s = dist::rank(), m = 8;
  dist::PipelineStats gpipe, ofob;
  pipelined(seed, 0.0, 16, 1, {.micro_batches = m, .schedule = dist::PipelineSchedule::gpipe},
            nullptr, &gpipe);
  pipelined(seed, 0.0, 16, 1, {.micro_batches = m, .schedule = dist::PipelineSchedule::one_f_one_b},
            nullptr, &ofob);
  EXPECT_EQ(gpipe.max_in_flight, m);
  EXPECT_EQ(ofob.max_in_flight, std::min(m, p - s));
  EXPECT_EQ(ofob.micro_batches, m);
  EXPECT_GT(ofob.compute_seconds, 0.0);
  EXPECT_LE(ofob.compute_seconds + ofob.wait_seconds, ofob.step_seconds * 1.0001);
}

TEST(Pipeline, PartitionsByGivenSizesAndByParameterCount) {
  const int p = dist::world_size();
  auto model = make_model(1, 0.0);
  // Parameter counts per layer: 176, 0, 0, 272, 0, 0, 136, 0, 45.
  const std::vector<int64_t> one = dist::balance_by_parameters(*model, 1);
  EXPECT_EQ(one, (std::vector<int64_t>{9}));
  const std::vector<int64_t> two = dist::balance_by_parameters(*model, 2);
  // 448 | 181 (largest 448) beats 176 | 453; the first of the equal cuts is taken.
  EXPECT_EQ(two, (std::vector<int64_t>{4, 5}));
  std::vector<int64_t> given(static_cast<size_t>(p), 1);
  given.back() = 9 - (p - 1);
  dist::Pipeline pipe(make_model(1, 0.0), {.partition = given});
  EXPECT_EQ(pipe.first_layer(), dist::rank());
  EXPECT_EQ(pipe.end_layer(), dist::rank() == p - 1 ? 9 : dist::rank() + 1);
  EXPECT_THROW(dist::balance_by_parameters(*model, 10), ValueError);
}

// One layer that costs ~100x the others gets a stage of its own when balancing by time.
TEST(Pipeline, BalancesByMeasuredTime) {
  nn::Sequential model{
      std::make_shared<nn::Linear>(64, 64),   std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(64, 2048), std::make_shared<nn::Linear>(2048, 2048),
      std::make_shared<nn::Linear>(2048, 8),  std::make_shared<nn::Tanh>()};
  const Tensor sample = random_tensor({64, 64}, fresh_seed()).to(DType::f32);
  // Median of 7 timings per layer: robust to a preemption of the small layers on a busy machine.
  const std::vector<int64_t> three = dist::balance_by_time(model, sample, 3, 7);
  ASSERT_EQ(three.size(), 3u);
  // Stages [0, 3) | [3] | [4, 6): the 2048 x 2048 layer alone.
  EXPECT_EQ(three, (std::vector<int64_t>{3, 1, 2}));
  for (const Tensor& p : model.parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_THROW(dist::balance_by_time(model, sample, 7), ValueError);
}

TEST(Pipeline, BadLayoutsAndBatchesAreRefusedOnEveryRank) {
  const int p = dist::world_size();
  // A partition that does not cover the model, or has the wrong number of stages.
  std::vector<int64_t> short_partition(static_cast<size_t>(p), 1);
  EXPECT_THROW(dist::Pipeline(make_model(1, 0.0), {.partition = short_partition}), ValueError);
  EXPECT_THROW(dist::Pipeline(make_model(1, 0.0), {.partition = {9, 0}}), ValueError);
  EXPECT_THROW(dist::Pipeline(make_model(1, 0.0), {.micro_batches = 0}), ValueError);
  // Fewer rows than micro-batches: every stage throws (none waits for the others).
  dist::Pipeline pipe(make_model(1, 0.0), {.micro_batches = 4});
  const Tensor x = pipe.is_first() ? batch_input(3, 3) : Tensor();
  const Tensor y = pipe.is_last() ? batch_target(3, 3) : Tensor();
  EXPECT_THROW(pipe.train_step(x, y, loss_fn), ValueError);
  // A target whose rows differ from the input's.
  const Tensor x8 = pipe.is_first() ? batch_input(3, 8) : Tensor();
  const Tensor y7 = pipe.is_last() ? batch_target(3, 7) : Tensor();
  EXPECT_THROW(pipe.train_step(x8, y7, loss_fn), ValueError);
  // The pipeline still works afterwards.
  const Tensor y8 = pipe.is_last() ? batch_target(3, 8) : Tensor();
  EXPECT_TRUE(std::isfinite(pipe.train_step(x8, y8, loss_fn)));
  // A world that the layout does not divide.
  if (p == 3) {
    EXPECT_THROW(dist::make_parallel_groups({.tensor = 2}), ValueError);
  }
  EXPECT_THROW(dist::make_parallel_groups({.tensor = 0}), ValueError);
  EXPECT_THROW(dist::parse_schedule("zigzag"), ValueError);
}

TEST(Pipeline, ForwardOnlyGivesTheModelsOutputOnTheLastStage) {
  const uint64_t seed = shared_seed();
  auto ref = make_model(seed, 0.0);
  const Tensor x = batch_input(seed, 7);
  Tensor expect;
  {
    NoGradGuard no_grad;
    expect = (*ref)(x);
  }
  dist::Pipeline pipe(make_model(seed, 0.0), {.micro_batches = 3});
  const Tensor out = pipe.forward(pipe.is_first() ? x : Tensor());
  if (pipe.is_last()) {
    EXPECT_TRUE(all_close(out, expect, 1e-14, 1e-14));
  } else {
    EXPECT_FALSE(out.defined());
  }
}

TEST(SubGroups, SplitAndNewGroupReduceWithinTheirMembers) {
  auto world = dist::default_group();
  const int r = world->rank(), n = world->size();
  // Even and odd ranks.
  auto parity = dist::split_group(r % 2);
  ASSERT_NE(parity, nullptr);
  Tensor t =
      from_vector(std::vector<double>{static_cast<double>(r + 1)}, {1}, {.dtype = DType::f64});
  parity->all_reduce(t)->wait();
  double expect = 0;
  for (int q = r % 2; q < n; q += 2) expect += q + 1;
  EXPECT_EQ(t.item<double>(), expect);
  EXPECT_EQ(parity->size(), (n - r % 2 + 1) / 2);
  EXPECT_EQ(parity->world_ranks()[static_cast<size_t>(parity->rank())], r);
  // Keys reorder the group: reversed ranks.
  auto reversed = dist::split_group(0, n - 1 - r);
  EXPECT_EQ(reversed->rank(), n - 1 - r);
  // new_group of the last two ranks (or the only one); the others get nullptr.
  std::vector<int> last{n - 1};
  if (n > 1) last.insert(last.begin(), n - 2);
  auto tail = dist::new_group(last);
  const bool member = r >= n - static_cast<int>(last.size());
  ASSERT_EQ(tail != nullptr, member);
  if (member && n > 1) {
    // Point to point inside the group, with group ranks.
    Tensor v = from_vector(std::vector<double>{42.0 + r}, {1}, {.dtype = DType::f64});
    if (tail->rank() == 0) {
      tail->send(v, 1)->wait();
    } else {
      tail->recv(v, 0)->wait();
      EXPECT_EQ(v.item<double>(), 42.0 + n - 2);
    }
  }
  // A list that differs between ranks is refused on every rank, before any communicator exists.
  if (n > 1) {
    EXPECT_THROW(dist::new_group(r == 0 ? std::vector<int>{0} : std::vector<int>{0, 1}),
                 dist::DistError);
  }
  EXPECT_THROW(dist::new_group({0, 0}), ValueError);
  EXPECT_THROW(dist::new_group({n}), ValueError);
}

// 2 data-parallel replicas x 2 pipeline stages, with dropout, equal one process on the global
// batch (every replica's rows draw where the global batch's draw puts them).
TEST(Layouts, DataTimesPipelineEqualsOneProcess) {
  if (dist::world_size() != 4) GTEST_SKIP() << "needs 4 ranks (runs in dist.np4)";
  const uint64_t seed = shared_seed();
  const int64_t global = 12, local = global / 2;
  const TrainRun ref = one_process(seed, 0.3, global, 3);
  dist::ParallelGroups g = dist::make_parallel_groups({.pipeline = 2});
  ASSERT_EQ(g.layout.data, 2);
  for (auto schedule : {dist::PipelineSchedule::gpipe, dist::PipelineSchedule::one_f_one_b}) {
    dist::Pipeline pipe(make_model(seed, 0.3),
                        {.micro_batches = 3,
                         .schedule = schedule,
                         .global_row_offset = g.data_rank * local,
                         .global_rows = global},
                        g.pipeline);
    optim::SGD opt(pipe.parameters(), {.lr = 0.1, .momentum = 0.9});
    manual_seed(seed + 99);
    TrainRun run;
    for (int k = 0; k < 3; ++k) {
      opt.zero_grad();
      const Tensor x = batch_input(seed + k, global).narrow(0, g.data_rank * local, local);
      const Tensor y = batch_target(seed + k, global).narrow(0, g.data_rank * local, local);
      Tensor loss = from_vector(std::vector<double>{pipe.train_step(x, y, loss_fn)}, {1},
                                {.dtype = DType::f64});
      dist::average_gradients(pipe.parameters(), *g.data);
      g.data->all_reduce(loss, dist::ReduceOp::avg)->wait();
      opt.step();
      run.losses.push_back(loss.item<double>());
    }
    for (const auto& [name, p] : pipe.stage().named_parameters()) run.params[name] = p.detach();
    expect_same(run, ref, std::string("2 DP x 2 PP ") + dist::schedule_name(schedule), 2);
  }
}

// 2 data-parallel replicas x 2 tensor-parallel ranks: a tensor-parallel MLP equals nn::MLP.
TEST(Layouts, DataTimesTensorEqualsOneProcess) {
  if (dist::world_size() != 4) GTEST_SKIP() << "needs 4 ranks (runs in dist.np4)";
  const uint64_t seed = shared_seed();
  dist::ParallelGroups g = dist::make_parallel_groups({.tensor = 2});
  ASSERT_EQ(g.layout.data, 2);
  const int64_t global = 8, local = 4, hidden = 12;
  manual_seed(seed);
  dist::TensorParallelMLP tp(kIn, hidden, kClasses, "relu", g.tensor);
  tp.to(DType::f64);
  manual_seed(seed);
  nn::Sequential ref{std::make_shared<nn::Linear>(kIn, hidden), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Linear>(hidden, kClasses)};
  ref.to(DType::f64);
  optim::SGD opt_tp(tp.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt_ref(ref.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int k = 0; k < 3; ++k) {
    const Tensor x = batch_input(seed + k, global), y = batch_target(seed + k, global);
    opt_tp.zero_grad();
    Tensor l = loss_fn(tp(x.narrow(0, g.data_rank * local, local)),
                       y.narrow(0, g.data_rank * local, local));
    l.backward();
    dist::average_gradients(tp.parameters(), *g.data);
    opt_tp.step();
    opt_ref.zero_grad();
    loss_fn(ref(x), y).backward();
    opt_ref.step();
  }
  const nn::StateDict full = tp.full_state_dict();
  for (const auto& [name, p] : ref.named_parameters()) {
    EXPECT_TRUE(all_close(full.at(name), p, 1e-12, 1e-13)) << name;
  }
}

}  // namespace
}  // namespace gradus::testing
