// The DataLoader's input pipeline: per-batch transforms (augmentation) drawn from the batch's own
// stream, so batches are identical at any number of workers, ranks or resume points; loader
// statistics; and the CUDA target (pinned buffers, copy stream), which skips without a GPU.
#include <chrono>
#include <random>
#include <thread>

#include "data/loader_stages.h"
#include "gradus/core/cuda.h"
#include "support/test_util.h"

namespace gradus::data {
namespace {

std::shared_ptr<TensorDataset> image_dataset(int64_t n, uint64_t seed) {
  Tensor x = testing::random_tensor({n, 2, 6, 5}, seed, 0, 1, DType::f32);
  Tensor y = arange(n);
  return std::make_shared<TensorDataset>(x, y);
}

const ImageAugmentOptions kAugment{
    .crop_padding = 2, .flip_p = 0.5, .mean = {0.5, 0.25}, .std = {0.2, 0.4}};

// Every batch input of `epochs` epochs, as host values.
std::vector<std::vector<double>> run(DataLoader& loader, int64_t epochs) {
  std::vector<std::vector<double>> out;
  for (int64_t e = 0; e < epochs; ++e) {
    loader.set_epoch(e);
    for (Example& b : loader) out.push_back(b.input.to(Device::cpu()).to_vector<double>());
  }
  return out;
}

DataLoaderOptions augmenting(uint64_t seed, int workers) {
  return {.batch_size = 8,
          .shuffle = true,
          .seed = seed,
          .num_workers = workers,
          .transform = image_augment(kAugment)};
}

TEST(LoaderPipeline, AugmentedBatchesAreIdenticalWithAnyNumberOfWorkers) {
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  auto data = image_dataset(45, seed);
  DataLoader reference_loader(data, augmenting(seed, 0));
  const auto reference = run(reference_loader, 2);
  ASSERT_EQ(reference.size(), 12u);  // 6 batches x 2 epochs
  for (int workers : {1, 2, 3}) {
    DataLoader loader(data, augmenting(seed, workers));
    EXPECT_EQ(run(loader, 2), reference) << workers << " workers";
  }
  // The augmentation is really applied, and differs from epoch to epoch.
  DataLoader plain(data, {.batch_size = 8, .shuffle = true, .seed = seed});
  const auto unaugmented = run(plain, 1);
  EXPECT_NE(unaugmented[0], reference[0]);
  DataLoader again(data, augmenting(seed, 2));
  again.set_epoch(1);
  std::vector<double> epoch1_first;
  for (Example& b : again) {
    epoch1_first = b.input.to_vector<double>();
    break;
  }
  EXPECT_EQ(epoch1_first, reference[6]);
}

TEST(LoaderPipeline, TransformDrawsFromTheBatchStream) {
  const uint64_t seed = testing::fresh_seed();
  auto data = image_dataset(30, seed);
  DataLoader loader(data, augmenting(seed, 2));
  loader.set_epoch(3);
  int64_t b = 0;
  for (Example& batch : loader) {
    const Example raw = data->get_batch(loader.batch_indices(3, b));
    Generator gen;
    gen.set_state(transform_stream(seed, 3, b, 0));
    EXPECT_EQ(batch.input.to_vector<double>(),
              augment_images(raw.input, kAugment, &gen).to_vector<double>())
        << "batch " << b;
    EXPECT_EQ(batch.target.to_vector<int64_t>(), raw.target.to_vector<int64_t>());
    ++b;
  }
  EXPECT_EQ(b, 4);
}

TEST(LoaderPipeline, RankSharesAugmentLikeTheWholeBatch) {
  const uint64_t seed = testing::fresh_seed();
  auto data = image_dataset(40, seed);
  DataLoaderOptions whole = augmenting(seed, 1);
  whole.drop_last = true;
  DataLoader one(data, whole);
  const auto global = run(one, 1);
  std::vector<std::vector<double>> shares[2];
  for (int rank : {0, 1}) {
    DataLoaderOptions o = augmenting(seed, 2);
    o.rank = rank;
    o.world_size = 2;
    DataLoader loader(data, o);
    shares[rank] = run(loader, 1);
  }
  ASSERT_EQ(shares[0].size(), global.size());
  for (size_t b = 0; b < global.size(); ++b) {
    std::vector<double> joined = shares[0][b];
    joined.insert(joined.end(), shares[1][b].begin(), shares[1][b].end());
    EXPECT_EQ(joined, global[b]) << "batch " << b;
  }
}

TEST(LoaderPipeline, ResumedLoopAugmentsTheSameBatches) {
  const uint64_t seed = testing::fresh_seed();
  auto data = image_dataset(45, seed);
  DataLoader full(data, augmenting(seed, 2));
  const auto all = run(full, 1);
  DataLoader resumed(data, augmenting(seed, 3));
  resumed.set_position({0, 4});
  std::vector<std::vector<double>> rest;
  for (Example& b : resumed) rest.push_back(b.input.to_vector<double>());
  EXPECT_EQ(rest, std::vector<std::vector<double>>(all.begin() + 4, all.end()));
}

TEST(LoaderPipeline, TransformErrorIsRethrownAtItsBatch) {
  for (int workers : {0, 2}) {
    DataLoader loader(
        image_dataset(20, 1),
        {.batch_size = 4, .num_workers = workers, .transform = [](Example& b, Generator&) {
           if (b.target.to_vector<int64_t>()[0] == 8) {
             throw ValueError("transform failed on purpose");
           }
         }});
    int64_t reached = 0;
    try {
      for (Example& b : loader) {
        (void)b;
        ++reached;
      }
      FAIL() << "no error";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("on purpose"), std::string::npos);
    }
    EXPECT_EQ(reached, 2) << workers << " workers";
  }
}

// get_batch sleeps: the loop has to wait for a loader this slow.
class SlowDataset : public Dataset {
 public:
  explicit SlowDataset(std::chrono::milliseconds delay) : inner_(image_dataset(64, 5)), d_(delay) {}
  int64_t size() const override { return inner_->size(); }
  Example get(int64_t i) const override { return inner_->get(i); }
  Example get_batch(const std::vector<int64_t>& indices) const override {
    std::this_thread::sleep_for(d_);
    return inner_->get_batch(indices);
  }

 private:
  std::shared_ptr<TensorDataset> inner_;
  std::chrono::milliseconds d_;
};

TEST(LoaderPipeline, StatsMeasureTheWaitForData) {
  using std::chrono::milliseconds;
  // Loading (20 ms a batch) is slower than the loop: nearly all of the loop's time is waiting.
  DataLoader slow(std::make_shared<SlowDataset>(milliseconds(20)),
                  {.batch_size = 8, .num_workers = 1});
  run(slow, 1);
  const LoaderStats s = slow.stats();
  EXPECT_EQ(s.batches, 8);
  EXPECT_EQ(s.samples, 64);
  EXPECT_GE(s.wait_seconds, 8 * 0.020 * 0.5);
  EXPECT_GE(s.elapsed_seconds, s.wait_seconds);
  EXPECT_NEAR(s.samples_per_second(), 64 / s.elapsed_seconds, 1e-9);
  // The loop (40 ms a batch) is slower than loading: it rarely waits.
  DataLoader fast(image_dataset(64, 5), {.batch_size = 8, .num_workers = 1});
  for (Example& b : fast) {
    (void)b;
    std::this_thread::sleep_for(milliseconds(40));
  }
  const LoaderStats f = fast.stats();
  EXPECT_EQ(f.batches, 8);
  EXPECT_LT(f.wait_seconds, 0.5 * f.elapsed_seconds);
  // Totals accumulate over epochs until reset.
  run(fast, 1);
  EXPECT_EQ(fast.stats().batches, 16);
  fast.reset_stats();
  EXPECT_EQ(fast.stats().batches, 0);
  EXPECT_EQ(fast.stats().wait_seconds, 0.0);
}

// Without a device, pinning fails: the batch stays in pageable memory, with one warning per pool.
TEST(LoaderPipeline, PinnedPoolFallsBackToPageableMemory) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device can pin memory";
  auto pool = std::make_shared<detail::PinnedPool>();
  const Tensor x = testing::random_tensor({4, 3}, testing::fresh_seed(), -1, 1, DType::f32);
  ::testing::internal::CaptureStderr();
  const Tensor a = pool->pinned_copy(x);
  const Tensor b = pool->pinned_copy(x);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(pool->pinning_failed());
  EXPECT_EQ(a.to_vector<double>(), x.to_vector<double>());
  EXPECT_EQ(b.to_vector<double>(), x.to_vector<double>());
  EXPECT_NE(err.find("cannot pin host memory"), std::string::npos) << err;
  EXPECT_EQ(err.find("cannot pin", err.find("cannot pin") + 1), std::string::npos)
      << "warned more than once: " << err;
}

TEST(LoaderPipelineCuda, DeviceBatchesEqualCpuBatches) {
  if (!cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device: pinned buffers and the copy stream are not exercised";
  }
  const uint64_t seed = testing::fresh_seed();
  auto data = image_dataset(45, seed);
  DataLoader cpu(data, augmenting(seed, 2));
  const auto expected = run(cpu, 2);
  for (int workers : {0, 2}) {
    for (bool pin : {true, false}) {
      DataLoaderOptions o = augmenting(seed, workers);
      o.device = Device::cuda();
      o.pin_memory = pin;
      DataLoader loader(data, o);
      std::vector<std::vector<double>> got;
      for (int64_t e = 0; e < 2; ++e) {
        loader.set_epoch(e);
        for (Example& b : loader) {
          EXPECT_TRUE(b.input.is_cuda() && b.target.is_cuda());
          got.push_back(b.input.to(Device::cpu()).to_vector<double>());
        }
      }
      EXPECT_EQ(got, expected) << workers << " workers, pin_memory " << pin;
    }
  }
  // Leaving a loop early waits for the copies still in flight, then frees their buffers.
  DataLoaderOptions o = augmenting(seed, 2);
  o.device = Device::cuda();
  DataLoader early(data, o);
  for (Example& b : early) {
    (void)b;
    break;
  }
  cuda::synchronize();
}

}  // namespace
}  // namespace gradus::data
