// CUDA graphs (cuda::Graph, `--cuda-graph`): a captured training step replayed gives the weights
// of the same step run eagerly, bit for bit, with no host waits; what a graph cannot replay is
// refused at capture with a message naming it, and the device stays usable afterwards.
#include "gpu/gpu_test_util.h"

namespace gradus {
namespace {

using namespace gpu_test;

struct Batches {
  std::vector<Tensor> x, y;
};

Batches make_batches(int n, int64_t batch) {
  Batches b;
  for (int i = 0; i < n; ++i) {
    b.x.push_back(rnd({batch, 20}, DType::f32).to(cuda0()));
    b.y.push_back(rnd_int({batch}, DType::i64, 0, 10).to(cuda0()));
  }
  return b;
}

std::shared_ptr<nn::Sequential> make_mlp(uint64_t seed) {
  manual_seed(seed);
  auto mlp = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(20, 64), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(64, 10)});
  mlp->to(cuda0());
  return mlp;
}

// Trains `steps` steps on the batches in turn, with a learning rate that changes every step (so a
// replay that froze the rate of the capture would differ), eagerly or through a graph captured
// after two eager steps. Returns the weights.
template <typename Opt, typename Options>
std::vector<Tensor> train(const Batches& data, int steps, bool graph, Options options,
                          uint64_t seed) {
  auto mlp = make_mlp(seed);
  Opt opt(mlp->parameters(), options);
  opt.set_capturable(true);
  Tensor x = data.x[0].clone(), y = data.y[0].clone();  // the graph's input buffers
  auto step = [&] {
    opt.zero_grad(/*set_to_none=*/false);
    Tensor loss = cross_entropy((*mlp)(x), y);
    loss.backward();
    opt.step();
  };
  cuda::Graph g;
  for (int i = 0; i < steps; ++i) {
    opt.set_lr(1e-3 * (1.0 + 0.1 * i));
    x.copy_(data.x[static_cast<size_t>(i) % data.x.size()]);
    y.copy_(data.y[static_cast<size_t>(i) % data.y.size()]);
    if (!graph || i < 2) {
      step();
    } else {
      if (!g.captured()) g.capture(step);
      g.replay();
    }
  }
  std::vector<Tensor> out;
  for (const Tensor& p : mlp->parameters()) out.push_back(p.detach().cpu());
  return out;
}

void expect_bitwise(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(bytes_of(a[i]), bytes_of(b[i])) << what << ": parameter " << i;
  }
}

TEST(CudaGraph, ReplayedAdamWStepsGiveTheEagerWeightsBitwise) {
  GRADUS_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  const Batches data = make_batches(3, 32);
  const optim::AdamWOptions o{.lr = 1e-3, .weight_decay = 0.1};
  const auto eager = train<optim::AdamW>(data, 12, false, o, seed);
  const auto replayed = train<optim::AdamW>(data, 12, true, o, seed);
  expect_bitwise(eager, replayed, "AdamW");
  // And the run moved: a replay that did nothing would leave the initial weights.
  const auto initial = [&] {
    std::vector<Tensor> w;
    for (const Tensor& p : make_mlp(seed)->parameters()) w.push_back(p.detach().cpu());
    return w;
  }();
  EXPECT_GT(max(abs(sub(initial[0], replayed[0]))).item(), 1e-4);
}

TEST(CudaGraph, ReplayedSgdMomentumStepsGiveTheEagerWeightsBitwise) {
  GRADUS_REQUIRE_GPU();
  const uint64_t seed = testing::fresh_seed();
  const Batches data = make_batches(3, 32);
  const optim::SGDOptions o{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4};
  expect_bitwise(train<optim::SGD>(data, 10, false, o, seed),
                 train<optim::SGD>(data, 10, true, o, seed), "SGD");
}

TEST(CudaGraph, ReplaysMakeNoHostWaitsAndCountStepsOnTheDevice) {
  GRADUS_REQUIRE_GPU();
  auto mlp = make_mlp(testing::fresh_seed());
  optim::Adam opt(mlp->parameters(), {.lr = 1e-3});
  opt.set_capturable(true);
  const Tensor x = rnd({16, 20}, DType::f32).to(cuda0());
  const Tensor y = rnd_int({16}, DType::i64, 0, 10).to(cuda0());
  auto step = [&] {
    opt.zero_grad(false);
    cross_entropy((*mlp)(x), y).backward();
    opt.step();
  };
  step();
  step();
  cuda::Graph g;
  g.capture(step);  // records; runs nothing
  cuda::synchronize();
  const uint64_t before = cuda::host_syncs();
  for (int i = 0; i < 5; ++i) g.replay();
  EXPECT_EQ(cuda::host_syncs() - before, 0u);
  // 2 eager steps + 5 replays; the capture itself did not step.
  const optim::OptimizerState st = opt.state_dict();
  EXPECT_EQ(st.scalars.at("state.0.step"), 7.0);
}

TEST(CudaGraph, AHostReadInsideIsRefusedByNameAndTheDeviceStaysUsable) {
  GRADUS_REQUIRE_GPU();
  const Tensor a = rnd({256}, DType::f32).to(cuda0());
  Tensor out = zeros({}, {DType::f32, cuda0()});
  cuda::Graph g;
  try {
    g.capture([&] {
      const Tensor s = sum(a);
      (void)s.item();
    });
    FAIL() << "item() inside a capture was accepted";
  } catch (const GraphCaptureError& e) {
    EXPECT_NE(std::string(e.what()).find("waits for the GPU"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(g.captured());
  EXPECT_FALSE(cuda::is_capturing());
  // Work after a refused capture runs normally, and a second capture of good work succeeds.
  cuda::Graph g2;
  g2.capture([&] { out.copy_(sum(mul(a, a))); });
  g2.replay();
  const double expected = sum(mul(a.cpu().to(DType::f64), a.cpu().to(DType::f64))).item();
  EXPECT_NEAR(out.item(), expected, 1e-3 * std::abs(expected));
}

TEST(CudaGraph, DropoutInsideIsRefused) {
  GRADUS_REQUIRE_GPU();
  const Tensor a = rnd({256}, DType::f32).to(cuda0());
  Tensor out = empty({256}, {DType::f32, cuda0()});
  cuda::Graph g;
  try {
    g.capture([&] { out.copy_(dropout(a, 0.5, true)); });
    FAIL() << "dropout inside a capture was accepted";
  } catch (const GraphCaptureError& e) {
    EXPECT_NE(std::string(e.what()).find("dropout"), std::string::npos) << e.what();
  }
}

TEST(CudaGraph, ATensorThatEscapesTheCaptureIsRefused) {
  GRADUS_REQUIRE_GPU();
  const Tensor a = rnd({1024}, DType::f32).to(cuda0());
  Tensor kept;
  cuda::Graph g;
  try {
    g.capture([&] { kept = mul(a, 2.0); });
    FAIL() << "a tensor created inside and kept was accepted";
  } catch (const GraphCaptureError& e) {
    EXPECT_NE(std::string(e.what()).find("still in use after it"), std::string::npos) << e.what();
  }
  kept = Tensor();  // its memory was the failed graph's: dropping it must not free anything
  const Tensor b = mul(a, 3.0);
  EXPECT_NEAR(b.cpu().to_vector<float>()[5], 3.0f * a.cpu().to_vector<float>()[5], 1e-5);
}

// A tensor made before the capture, read inside it and dropped there: every replay still reads
// its block, so the graph keeps it (a tensor allocated after the capture must not be given it)
// and frees it once, when the graph is destroyed.
TEST(CudaGraph, ATensorFromBeforeFreedInsideLivesAsLongAsTheGraph) {
  GRADUS_REQUIRE_GPU();
  const int64_t n = int64_t{1} << 20;
  Tensor before = rnd({n}, DType::f32).to(cuda0());
  const double expected = sum(before.cpu().to(DType::f64)).item();
  Tensor out = zeros({}, {DType::f32, cuda0()});
  cuda::Graph warm;  // the capture stream's GEMM workspace exists from here on
  warm.capture([&] { out.copy_(sum(out)); });
  const size_t held = cuda::memory_stats().allocated;
  size_t with_other = 0;
  {
    cuda::Graph g;
    g.capture([&] {
      out.copy_(sum(before));
      before = Tensor();  // freed during the capture: the graph keeps the block
    });
    EXPECT_EQ(cuda::memory_stats().allocated, held);
    // Same size: the pool would hand this tensor the dropped block if the graph had let it go.
    const Tensor other = full({n}, 7.0, {DType::f32, cuda0()});
    with_other = cuda::memory_stats().allocated;
    for (int i = 0; i < 3; ++i) g.replay();
    EXPECT_NEAR(out.item(), expected, 1e-3 * (1.0 + std::abs(expected)));
    EXPECT_NEAR(sum(other).item(), 7.0 * static_cast<double>(n), 1.0);
  }
  // The graph destroyed (and `other` dropped): its kept block went back to the pool.
  EXPECT_EQ(cuda::memory_stats().allocated, with_other - 2 * (static_cast<size_t>(n) * 4));
}

}  // namespace
}  // namespace gradus
