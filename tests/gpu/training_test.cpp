// Whole training steps on the GPU against the same steps on the CPU: an MLP with SGD (momentum)
// and a small CNN (conv, batch norm, max pool, dropout-free) with AdamW, identical initial weights
// (same seed) and data; losses and parameters must agree after several steps.
#include "gpu/gpu_test_util.h"

namespace gradus {
namespace {

using namespace gpu_test;

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(20, 64), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(64, 64), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Linear>(64, 10)});
}

std::shared_ptr<nn::Sequential> make_cnn(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      // No bias before the batch norm: its gradient is zero up to rounding, which AdamW would
      // turn into full-size steps of opposite sign on the two devices.
      std::make_shared<nn::Conv2d>(3, 8, 3, nn::ConvOptions{.padding = 1, .bias = false}),
      std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(8, 16, 3),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::AdaptiveAvgPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(64, 10)});
}

// Runs `steps` steps on both devices, comparing the losses, then the parameters.
template <typename MakeOpt>
void train_and_compare(nn::Module& cpu_model, nn::Module& gpu_model, const Tensor& x,
                       const Tensor& y, int steps, const MakeOpt& make_opt, double rtol) {
  gpu_model.to(cuda0());
  auto opt_c = make_opt(cpu_model.parameters());
  auto opt_g = make_opt(gpu_model.parameters());
  const Tensor xg = x.to(cuda0()), yg = y.to(cuda0());
  for (int step = 0; step < steps; ++step) {
    opt_c->zero_grad();
    opt_g->zero_grad();
    Tensor loss_c = cross_entropy(cpu_model(x), y);
    Tensor loss_g = cross_entropy(gpu_model(xg), yg);
    loss_c.backward();
    loss_g.backward();
    EXPECT_NEAR(loss_g.item(), loss_c.item(), rtol * std::max(1.0, std::fabs(loss_c.item())))
        << "step " << step;
    opt_c->step();
    opt_g->step();
  }
  const auto pc = cpu_model.named_parameters(), pg = gpu_model.named_parameters();
  ASSERT_EQ(pc.size(), pg.size());
  for (size_t i = 0; i < pc.size(); ++i) {
    EXPECT_TRUE(close(pg[i].second, pc[i].second, rtol, 1.0)) << pc[i].first;
    EXPECT_TRUE(pg[i].second.is_cuda());
  }
}

TEST(CudaTraining, MlpWithSgdMatchesCpu) {
  GRADUS_REQUIRE_GPU();
  cuda::set_allow_tf32(false);
  const uint64_t seed = testing::fresh_seed();
  auto cpu_model = make_mlp(seed), gpu_model = make_mlp(seed);
  const Tensor x = rnd({128, 20}, DType::f32, -2, 2);
  const Tensor y = rnd_int({128}, DType::i64, 0, 10);
  train_and_compare(
      *cpu_model, *gpu_model, x, y, 5,
      [](std::vector<Tensor> params) {
        return std::make_unique<optim::SGD>(std::move(params),
                                            optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      },
      1e-4);
}

TEST(CudaTraining, CnnWithAdamWMatchesCpu) {
  GRADUS_REQUIRE_GPU();
  cuda::set_allow_tf32(false);
  const uint64_t seed = testing::fresh_seed();
  auto cpu_model = make_cnn(seed), gpu_model = make_cnn(seed);
  const Tensor x = rnd({16, 3, 16, 16}, DType::f32, -1, 1);
  const Tensor y = rnd_int({16}, DType::i64, 0, 10);
  train_and_compare(
      *cpu_model, *gpu_model, x, y, 4,
      [](std::vector<Tensor> params) {
        return std::make_unique<optim::AdamW>(std::move(params), optim::AdamWOptions{.lr = 1e-3});
      },
      2e-4);
  // Running statistics of the batch norm moved the same way.
  const auto bc = cpu_model->named_buffers(), bg = gpu_model->named_buffers();
  for (size_t i = 0; i < bc.size(); ++i) {
    if (!is_floating(bc[i].second.dtype())) continue;
    EXPECT_TRUE(close(bg[i].second, bc[i].second, 1e-4, 1.0)) << bc[i].first;
  }
}

TEST(CudaTraining, MixedPrecisionMatmulIsClose) {
  GRADUS_REQUIRE_GPU();
  // bf16 forward of an MLP on the GPU stays within bf16 tolerance of the f32 CPU forward.
  const uint64_t seed = testing::fresh_seed();
  auto cpu_model = make_mlp(seed), gpu_model = make_mlp(seed);
  gpu_model->to(cuda0(), DType::bf16);
  const Tensor x = rnd({64, 20}, DType::f32);
  const Tensor yc = (*cpu_model)(x);
  const Tensor yg = (*gpu_model)(x.to(cuda0(), DType::bf16)).to(DType::f32);
  EXPECT_TRUE(close(yg, yc, 4e-2, 2.0));
}

}  // namespace
}  // namespace gradus
