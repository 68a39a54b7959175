// The library's training loop (gradus/train/trainer.h) against a hand-written loop over the same
// model, data and optimizer, and its checkpoints: a run stopped after some steps and resumed ends
// bitwise where the uninterrupted run ends; bad configurations are refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "gradus/gradus.h"
#include "gradus/monitor/profiler.h"
#include "gradus/optim/scheduler.h"
#include "gradus/train/train.h"
#include "support/test_util.h"

namespace gradus {
namespace {

namespace fs = std::filesystem;
using testing::fresh_seed;
using testing::random_tensor;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("gradus_trainer_" + std::to_string(::getpid()) +
                                               "_" + std::to_string(fresh_seed() % 1000000));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

std::shared_ptr<data::TensorDataset> make_data(uint64_t seed, int64_t n) {
  const Tensor x = random_tensor({n, 12}, seed, -2, 2, DType::f32);
  // Labels that depend on the inputs, so the loss can fall.
  const Tensor y = argmax(matmul(x, random_tensor({12, 4}, seed + 1, -1, 1, DType::f32)), -1);
  return std::make_shared<data::TensorDataset>(x, y);
}

std::shared_ptr<nn::Module> make_model(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(12, 32), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(32, 4)});
}

std::unique_ptr<optim::Optimizer> make_sgd(std::vector<Tensor> p) {
  return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 0.2, .momentum = 0.9});
}

train::TrainerOptions options(int64_t epochs) {
  train::TrainerOptions o;
  o.epochs = epochs;
  o.max_grad_norm = 0.5;  // bites: the gradients' norm starts above it
  o.scheduler = [](optim::Optimizer& opt, int64_t, int64_t) {
    return std::make_shared<optim::StepLR>(opt, 7, 0.5);
  };
  return o;
}

data::DataLoader make_loader(std::shared_ptr<data::TensorDataset> d, uint64_t seed) {
  return data::DataLoader(d, {.batch_size = 16, .shuffle = true, .seed = seed});
}

bool same_weights(nn::Module& a, nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!testing::all_close(pa[i], pb[i], 0, 0)) return false;
  }
  return true;
}

TEST(Trainer, MatchesAHandWrittenLoopBitwise) {
  const uint64_t seed = fresh_seed();
  const auto data = make_data(seed, 100);  // 7 batches per epoch, the last one short
  auto model = make_model(seed);
  train::Trainer trainer(model, make_sgd, std::make_shared<train::ClassificationTask>(data),
                         options(3));
  std::vector<double> losses;
  int epochs_seen = 0;
  trainer.on_step = [&](const train::StepReport& r) {
    EXPECT_EQ(r.step, static_cast<int64_t>(losses.size()) + 1);
    losses.push_back(r.loss);
  };
  trainer.on_epoch = [&](const train::EpochReport& r) {
    EXPECT_EQ(r.epoch, epochs_seen++);
    EXPECT_TRUE(r.eval.count("accuracy") == 1 && r.eval.count("loss") == 1);
  };
  data::DataLoader loader = make_loader(data, seed);
  const train::FitResult result = trainer.fit(loader);
  EXPECT_EQ(result.steps, 21);
  EXPECT_FALSE(result.stopped);
  EXPECT_EQ(epochs_seen, 3);
  ASSERT_EQ(losses.size(), 21u);
  EXPECT_LT(result.last_epoch->train_loss, losses.front());  // it learned

  // The same training written out by hand.
  auto ref = make_model(seed);
  auto opt = make_sgd(ref->parameters());
  optim::StepLR sched(*opt, 7, 0.5);
  data::DataLoader ref_loader = make_loader(data, seed);
  int64_t step = 0;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    ref_loader.set_epoch(epoch);
    for (data::Example& b : ref_loader) {
      opt->zero_grad();
      const Tensor loss = cross_entropy((*ref)(b.input), b.target);
      loss.backward();
      const double norm = optim::clip_grad_norm(ref->trainable_parameters(), 0.5).item();
      if (step < 3) {
        EXPECT_GT(norm, 0.5) << "the clipping did not bite at step " << step;
      }
      opt->step();
      sched.step();
      EXPECT_EQ(loss.item(), losses[static_cast<size_t>(step)]) << "step " << step;
      ++step;
    }
  }
  EXPECT_TRUE(same_weights(*model, *ref));
}

TEST(Trainer, StoppedAndResumedEndsWhereTheUninterruptedRunEnds) {
  const uint64_t seed = fresh_seed();
  const auto data = make_data(seed, 100);
  TempDir dir;
  auto with_checkpoints = [&](bool resume, int64_t stop_after) {
    train::TrainerOptions o = options(3);
    o.checkpoints = {.dir = dir.path.string(), .keep = 2, .resume = resume};
    o.stop_after_steps = stop_after;
    o.config = R"({"model": "mlp12"})";
    return o;
  };
  // Stopped mid-epoch (step 10 of 21), with a checkpoint.
  auto first = make_model(seed);
  train::Trainer a(first, make_sgd, std::make_shared<train::ClassificationTask>(),
                   with_checkpoints(false, 10));
  data::DataLoader la = make_loader(data, seed);
  const train::FitResult ra = a.fit(la);
  EXPECT_TRUE(ra.stopped);
  EXPECT_EQ(ra.steps, 10);
  ASSERT_FALSE(ra.checkpoint.empty());
  EXPECT_TRUE(fs::exists(ra.checkpoint));
  // Resumed in a new Trainer whose model starts from other weights: the checkpoint's win.
  auto second = make_model(seed + 99);
  train::Trainer b(second, make_sgd, std::make_shared<train::ClassificationTask>(),
                   with_checkpoints(true, 0));
  std::vector<int64_t> steps;
  b.on_step = [&](const train::StepReport& r) { steps.push_back(r.step); };
  data::DataLoader lb = make_loader(data, seed);
  const train::FitResult rb = b.fit(lb);
  EXPECT_FALSE(rb.stopped);
  EXPECT_EQ(rb.steps, 21);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.front(), 11);  // not one step repeated or skipped
  EXPECT_EQ(steps.size(), 11u);
  // Uninterrupted.
  auto whole = make_model(seed);
  train::Trainer c(whole, make_sgd, std::make_shared<train::ClassificationTask>(), options(3));
  data::DataLoader lc = make_loader(data, seed);
  c.fit(lc);
  EXPECT_TRUE(same_weights(*second, *whole));
  // A second run on the same directory without resume is refused, naming the way out.
  auto third = make_model(seed);
  train::Trainer d(third, make_sgd, std::make_shared<train::ClassificationTask>(),
                   with_checkpoints(false, 0));
  data::DataLoader ld = make_loader(data, seed);
  try {
    d.fit(ld);
    FAIL() << "a second run mixed its checkpoints into a full directory";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("pass --resume"), std::string::npos) << e.what();
  }
}

TEST(Trainer, AsynchronousCheckpointsAreTheSynchronousFilesByteForByte) {
  const uint64_t seed = fresh_seed();
  const auto data = make_data(seed, 100);
  TempDir sync_dir, async_dir;
  auto run = [&](const fs::path& dir, bool async) {
    train::TrainerOptions o = options(2);
    o.checkpoints = {.dir = dir.string(), .keep = 0, .async = async};
    o.checkpoint_every = 1;  // every step: each write overlaps the next step's work
    o.config = R"({"model": "mlp12"})";
    auto model = make_model(seed);
    train::Trainer t(model, make_sgd, std::make_shared<train::ClassificationTask>(), o);
    data::DataLoader loader = make_loader(data, seed);
    return t.fit(loader);
  };
  const train::FitResult a = run(sync_dir.path, false), b = run(async_dir.path, true);
  // 2 epochs of 7 steps; the last step once more with the loader at the end (the final state).
  EXPECT_EQ(a.checkpoint_times.written, 15);
  EXPECT_EQ(b.checkpoint_times.written, 15);
  EXPECT_GT(b.checkpoint_times.write_seconds, 0);
  const auto files = io::list_checkpoints(async_dir.path.string());
  ASSERT_EQ(files.size(), 14u);  // all there when fit() returns: the last write was waited for
  auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const auto& [step, path] : files) {
    const std::string twin = (sync_dir.path / fs::path(path).filename()).string();
    ASSERT_TRUE(fs::exists(twin)) << twin;
    // Copied before the next step changed the weights: the same bytes as the synchronous write.
    EXPECT_EQ(bytes(path), bytes(twin)) << "step " << step;
  }
  EXPECT_EQ(b.checkpoint, files.back().second);
}

TEST(Trainer, AnAsynchronousWriteErrorStopsTheRunNamingTheFile) {
  const uint64_t seed = fresh_seed();
  const auto data = make_data(seed, 100);
  TempDir dir;
  const fs::path blocked = dir.path / "ck";
  train::TrainerOptions o = options(2);
  o.checkpoints = {.dir = blocked.string(), .keep = 0, .async = true};
  o.checkpoint_every = 1;
  auto model = make_model(seed);
  train::Trainer t(model, make_sgd, std::make_shared<train::ClassificationTask>(), o);
  // After the first write starts, the directory becomes a file: a later write fails on the
  // background thread, and the next save (or the end of fit) rethrows it.
  int steps = 0;
  t.on_step = [&](const train::StepReport&) {
    if (++steps == 2) {
      // (A write starting meanwhile may create the directory again before the file replaces
      // it: until a file stands there, which every later write then fails on.)
      do {
        fs::remove_all(blocked);
        std::ofstream(blocked.string()) << "not a directory";
      } while (!fs::is_regular_file(blocked));
    }
  };
  data::DataLoader loader = make_loader(data, seed);
  try {
    t.fit(loader);
    FAIL() << "the failed background write went unreported";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find(blocked.string()), std::string::npos) << e.what();
  }
}

TEST(Trainer, RefusesWhatItCannotDoByName) {
  const auto data = make_data(1, 32);
  auto expect_refusal = [&](train::TrainerOptions o, const std::string& strategy,
                            const std::string& words) {
    try {
      train::Trainer t(make_model(1), make_sgd, std::make_shared<train::ClassificationTask>(), o,
                       train::make_strategy(strategy));
      FAIL() << "accepted: " << words;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  train::TrainerOptions f16;
  f16.amp = DType::f16;
  expect_refusal(f16, "ps", "'ps' strategy");
  train::TrainerOptions i32;
  i32.amp = DType::i32;
  expect_refusal(i32, "local", "amp is bf16 or f16");
  train::TrainerOptions nan_clip;
  nan_clip.max_grad_norm = std::nan("");
  expect_refusal(nan_clip, "local", "max_grad_norm");
  train::TrainerOptions graph;
  graph.cuda_graph = true;
  train::Trainer t(make_model(1), make_sgd, std::make_shared<train::ClassificationTask>(), graph);
  data::DataLoader loader = make_loader(data, 1);
  try {
    t.fit(loader);
    FAIL() << "a CUDA-graph step on the CPU";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA device"), std::string::npos) << e.what();
  }
}

TEST(Trainer, ADivergingLossNamesTheStep) {
  const auto data = make_data(2, 64);
  train::TrainerOptions o;
  auto model = make_model(2);
  train::Trainer t(
      model,
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(std::move(p), optim::SGDOptions{.lr = 1e30});
      },
      std::make_shared<train::ClassificationTask>(), o);
  data::DataLoader loader = make_loader(data, 2);
  try {
    t.fit(loader);
    FAIL() << "trained on through a non-finite loss";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("diverged"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("at step"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradus

namespace gradus {
namespace {

// TrainerOptions::profile: steps 2 to 4 of a run recorded and written as a Chrome trace whose
// step markers count three steps and whose events include the model's ops.
TEST(Trainer, ProfilesTheChosenSteps) {
  if (!monitor::Profiler::available()) GTEST_SKIP() << "the profiler is compiled out";
  const uint64_t seed = fresh_seed();
  TempDir dir;
  const std::string trace = (dir.path / "trace.json").string();
  auto model = make_model(seed);
  train::TrainerOptions o = options(1);
  o.profile = {.trace = trace, .first_step = 2, .last_step = 4};
  train::Trainer trainer(model, make_sgd, std::make_shared<train::ClassificationTask>(), o);
  data::DataLoader loader = make_loader(make_data(seed, 100), seed);
  trainer.fit(loader);
  std::ifstream in(trace);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty()) << "no trace at " << trace;
  const auto json = nlohmann::json::parse(text);
  int steps = 0, linears = 0;
  for (const auto& e : json.at("traceEvents")) {
    const std::string name = e.value("name", "");
    steps += name.rfind("ProfilerStep", 0) == 0 ? 1 : 0;
    linears += name == "linear" ? 1 : 0;
  }
  EXPECT_EQ(steps, 3) << "step markers in the trace";
  EXPECT_GE(linears, 3 * 2) << "two linear layers' forward per step";
}

}  // namespace
}  // namespace gradus

namespace gradus {
namespace {

// TrainerOptions::accumulate: two batches of 16 per optimizer step train what one batch of 32
// does (the shuffled order is the same, each half's loss counts half), clipping included; the
// epoch's odd batch out is skipped, and steps count optimizer steps.
TEST(Trainer, AccumulatesGradientsOverBatches) {
  const uint64_t seed = fresh_seed();
  const auto data = make_data(seed, 100);  // 3 batches of 32 (+4 examples), 6 of 16 (+4)
  auto whole = make_model(seed);
  auto halves = make_model(seed);
  train::Trainer a(whole, make_sgd, std::make_shared<train::ClassificationTask>(), options(2));
  data::DataLoader big(data, {.batch_size = 32, .shuffle = true, .seed = seed, .drop_last = true});
  const train::FitResult ra = a.fit(big);
  train::TrainerOptions o = options(2);
  o.accumulate = 2;
  train::Trainer b(halves, make_sgd, std::make_shared<train::ClassificationTask>(), o);
  data::DataLoader small(data,
                         {.batch_size = 16, .shuffle = true, .seed = seed, .drop_last = true});
  const train::FitResult rb = b.fit(small);
  EXPECT_EQ(ra.steps, 6);
  EXPECT_EQ(rb.steps, 6);
  const auto pa = whole->parameters(), pb = halves->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(testing::all_close(pb[i], pa[i], 1e-5, 1e-6))
        << "parameter " << i << " seed " << seed;
  }
  ASSERT_TRUE(ra.last_epoch && rb.last_epoch);
  EXPECT_NEAR(rb.last_epoch->train_loss, ra.last_epoch->train_loss, 1e-5);
}

TEST(Trainer, AccumulatingMoreBatchesThanAnEpochHasIsRefused) {
  auto model = make_model(1);
  train::TrainerOptions o = options(1);
  o.accumulate = 8;
  train::Trainer t(model, make_sgd, std::make_shared<train::ClassificationTask>(), o);
  data::DataLoader loader(make_data(1, 64), {.batch_size = 16});
  EXPECT_THROW(
      {
        try {
          t.fit(loader);
        } catch (const ValueError& e) {
          EXPECT_NE(std::string(e.what()).find("fewer than the 8 one optimizer step accumulates"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      ValueError);
}

}  // namespace
}  // namespace gradus
