// train::choose_batch_size under a CPU memory limit: the size it chooses runs a full training
// step of the run's kind (the task's loss, backward, the optimizer) within the limit, twice that
// does not, and the search leaves the random stream where it found it.
#include <gtest/gtest.h>

#include "gradus/gradus.h"
#include "gradus/train/train.h"
#include "support/test_util.h"

namespace gradus {
namespace {

struct MemoryLimit {
  explicit MemoryLimit(size_t bytes) { host::set_memory_limit(bytes); }
  ~MemoryLimit() { host::set_memory_limit(0); }
};

TEST(ChooseBatchSize, TheChoiceFitsUnderTheLimitAndTwiceItDoesNot) {
  const uint64_t seed = testing::fresh_seed();
  manual_seed(seed);
  auto make_model = [] {
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(256, 512), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(512, 10)});
  };
  auto make_adam = [](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(std::move(p));
  };
  auto task = std::make_shared<train::ClassificationTask>();
  auto make_batch = [](int64_t rows) {
    return data::Example{randn({rows, 256}), randint(0, 10, {rows}, {DType::i64})};
  };
  auto step_fits = [&](int64_t rows) {
    auto model = make_model();
    auto opt = make_adam(model->parameters());
    try {
      const data::Example batch = make_batch(rows);
      task->loss(*model, batch).backward();
      opt->step();
      return true;
    } catch (const OutOfMemoryError&) {
      return false;
    }
  };
  const PhiloxState before = default_generator().state();
  const size_t limit = host::memory_stats().allocated_bytes + (24u << 20);
  MemoryLimit cap(limit);
  const train::BatchSizeChoice choice = train::choose_batch_size({.make_model = make_model,
                                                                  .make_optimizer = make_adam,
                                                                  .task = task,
                                                                  .make_batch = make_batch});
  EXPECT_EQ(default_generator().state().offset, before.offset) << "the search moved the stream";
  ASSERT_GT(choice.per_rank, 0);
  EXPECT_EQ(choice.global, choice.per_rank);
  EXPECT_GT(choice.search.smallest_fail, 0) << "the limit never bit: the test is void";
  EXPECT_TRUE(step_fits(choice.per_rank)) << choice.per_rank << " rows (seed " << seed << ")";
  EXPECT_FALSE(step_fits(2 * choice.search.largest_fit))
      << 2 * choice.search.largest_fit << " rows fit under the limit";
}

TEST(ChooseBatchSize, RefusesMissingPieces) {
  EXPECT_THROW(train::choose_batch_size({}), ValueError);
}

}  // namespace
}  // namespace gradus
