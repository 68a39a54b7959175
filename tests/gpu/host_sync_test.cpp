// No host syncs in a training step: index checks run on the device and report at the next wait,
// the kernels skip a bad index meanwhile, and cuda::host_syncs() counts every wait of the host
// on the GPU, so a whole MLP or CNN step after warm-up is seen to make none.
#include "gpu/gpu_test_util.h"
#include "ops/gradcheck.h"

namespace gradus {
namespace {

using namespace gpu_test;
using testing::index_tensor;

TEST(CudaHostSyncs, ReadingATensorBackCountsOneWait) {
  GRADUS_REQUIRE_GPU();
  const Tensor x = rnd({1000}, DType::f32).to(cuda0());
  const Tensor s = sum(mul(x, x));
  const uint64_t before = cuda::host_syncs();
  (void)s.item();
  EXPECT_EQ(cuda::host_syncs() - before, 1u);
  cuda::synchronize();
  EXPECT_EQ(cuda::host_syncs() - before, 2u);
}

// Steps `steps` times and returns how many host waits they made.
template <typename Opt>
uint64_t syncs_of_steps(nn::Module& model, Opt& opt, const Tensor& x, const Tensor& y, int steps) {
  const uint64_t before = cuda::host_syncs();
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    opt.step();
  }
  return cuda::host_syncs() - before;
}

TEST(CudaHostSyncs, MlpAndCnnTrainingStepsMakeNoneAfterWarmup) {
  GRADUS_REQUIRE_GPU();
  manual_seed(testing::fresh_seed());
  {
    nn::Sequential mlp({std::make_shared<nn::Linear>(20, 64), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(64, 10)});
    mlp.to(cuda0());
    optim::SGD opt(mlp.parameters(), {.lr = 0.05, .momentum = 0.9});
    const Tensor x = rnd({64, 20}, DType::f32).to(cuda0());
    const Tensor y = rnd_int({64}, DType::i64, 0, 10).to(cuda0());
    (void)syncs_of_steps(mlp, opt, x, y, 2);  // warm-up: handles, workspaces, the pool
    EXPECT_EQ(syncs_of_steps(mlp, opt, x, y, 3), 0u) << "MLP + SGD";
  }
  {
    nn::Sequential cnn({std::make_shared<nn::Conv2d>(3, 8, 3, nn::ConvOptions{.padding = 1}),
                        std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
                        std::make_shared<nn::Linear>(8 * 8 * 8, 10)});
    cnn.to(cuda0());
    optim::AdamW opt(cnn.parameters(), {.lr = 1e-3});
    const Tensor x = rnd({16, 3, 16, 16}, DType::f32).to(cuda0());
    const Tensor y = rnd_int({16}, DType::i64, 0, 10).to(cuda0());
    (void)syncs_of_steps(cnn, opt, x, y, 2);
    EXPECT_EQ(syncs_of_steps(cnn, opt, x, y, 3), 0u) << "CNN + AdamW";
  }
}

TEST(CudaIndexChecks, AnOutOfRangeIndexIsRaisedAtTheNextWaitOnce) {
  GRADUS_REQUIRE_GPU();
  const Tensor table = rnd({5, 3}, DType::f32).to(cuda0());
  const Tensor index = index_tensor({1, 10, 2}, {3}).to(cuda0());
  const uint64_t before = cuda::host_syncs();
  Tensor rows = embedding(table, index);  // queued: no wait, no error yet
  EXPECT_EQ(cuda::host_syncs(), before);
  try {
    (void)rows.to(Device::cpu());
    ADD_FAILURE() << "the bad index was not reported";
  } catch (const IndexError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("embedding: index 10 is out of range (valid range [0, 5))"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("GRADUS_CUDA_SYNC_CHECKS"), std::string::npos) << what;
  }
  // Reported once; the kernel skipped the bad row (zeros) and gathered the others.
  const Tensor got = rows.to(Device::cpu());
  const Tensor t = table.to(Device::cpu());
  EXPECT_TRUE(identical(got.select(0, 0), t.select(0, 1)));
  EXPECT_TRUE(identical(got.select(0, 1), zeros({3})));
  EXPECT_TRUE(identical(got.select(0, 2), t.select(0, 2)));
}

TEST(CudaIndexChecks, ClassTargetsAllowTheIgnoreIndexAndReportOthers) {
  GRADUS_REQUIRE_GPU();
  const Tensor logits = rnd({4, 6}, DType::f32).to(cuda0());
  const Tensor ok = index_tensor({0, -100, 5, 2}, {4});
  EXPECT_NO_THROW((void)cross_entropy(logits, ok.to(cuda0())).item());
  const Tensor bad = index_tensor({0, 6, 5, 2}, {4});
  GRADUS_EXPECT_ERROR((void)cross_entropy(logits, bad.to(cuda0())).item(), IndexError,
                      "cross_entropy: target 6 is out of range for 6 classes");
  // gather and scatter_add report their own names and sizes.
  const Tensor x = rnd({2, 3}, DType::f32).to(cuda0());
  const Tensor idx = index_tensor({0, 3}, {1, 2});
  GRADUS_EXPECT_ERROR((void)gather(x, 1, idx.to(cuda0())).to(Device::cpu()), IndexError,
                      "gather: index 3 is out of range (valid range [0, 3))");
}

}  // namespace
}  // namespace gradus
