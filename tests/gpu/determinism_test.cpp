// Deterministic mode on CUDA (gradus/core/determinism.h): every kernel that accumulates with
// atomics either has an ordered variant that gives the same bits on every run, or refuses; cuDNN
// is restricted to its deterministic algorithms; two identical training runs end with bitwise
// identical weights.
#include "gpu/gpu_test_util.h"

namespace gradus {
namespace {

using namespace gpu_test;

// Runs fn twice on the GPU and expects bitwise identical results.
template <typename Fn>
void expect_repeatable(const Fn& fn, const std::string& what) {
  const Tensor first = fn().to(Device::cpu());
  const Tensor second = fn().to(Device::cpu());
  EXPECT_TRUE(identical(first, second)) << what << ": two runs differ";
}

TEST(CudaDeterminism, IndexAddRowsIsOrderedAndMatchesTheCpu) {
  GRADUS_REQUIRE_GPU();
  DeterministicGuard on;
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    // Few rows, many repeats: an atomics order would show in the low bits.
    const int64_t vocab = 7, n = 5003, d = 131;
    const Tensor index = rnd_int({n}, DType::i64, 0, vocab);
    const Tensor g = rnd({n, d}, t);
    auto on_gpu = [&] {
      const Tensor table = zeros({vocab, d}, {t, cuda0()});
      gpu().index_add_rows(g.to(cuda0()), index.to(cuda0()), table);
      return table;
    };
    expect_repeatable(on_gpu, std::string("index_add_rows ") + dtype_name(t));
    // The CPU sums in index order too (16-bit floats in float32, rounded once): the same bits.
    const Tensor expected = zeros({vocab, d}, {t});
    cpu().index_add_rows(g, index, expected);
    EXPECT_TRUE(identical(on_gpu().to(Device::cpu()), expected)) << dtype_name(t);
  }
}

TEST(CudaDeterminism, MaxPoolBackwardWithOverlappingWindowsIsOrdered) {
  GRADUS_REQUIRE_GPU();
  DeterministicGuard on;
  for (DType t : {DType::f32, DType::f16}) {
    // 3x3 windows at stride 1: each input is the maximum of up to 9 windows.
    const Tensor x0 = rnd({4, 5, 17, 19}, t).to(cuda0());
    auto on_gpu = [&] {
      Tensor x = x0.detach().set_requires_grad();
      Tensor y = max_pool2d(x, {.kernel_size = {3, 3}, .stride = {1, 1}});
      sum(mul(y, y)).backward();
      return x.grad();
    };
    expect_repeatable(on_gpu, std::string("max_pool2d backward ") + dtype_name(t));
  }
}

TEST(CudaDeterminism, FloatScatterAddRefusesIntegerScatterAddRuns) {
  GRADUS_REQUIRE_GPU();
  DeterministicGuard on;
  const Tensor index = rnd_int({6, 4}, DType::i64, 0, 3).to(cuda0());
  const Tensor src = rnd({6, 4}, DType::f32).to(cuda0());
  EXPECT_THROW(gpu().scatter_add(zeros({3, 4}, {DType::f32, cuda0()}), 0, index, src), ValueError);
  const Tensor srci = rnd_int({6, 4}, DType::i64, -5, 5).to(cuda0());
  const Tensor outi = zeros({3, 4}, {DType::i64, cuda0()});
  EXPECT_NO_THROW(gpu().scatter_add(outi, 0, index, srci));
  DeterministicGuard off(false);
  EXPECT_NO_THROW(gpu().scatter_add(zeros({3, 4}, {DType::f32, cuda0()}), 0, index, src));
}

// A CNN (cuDNN convolutions, batch norm, overlapping max pool) and an embedding model, trained
// twice from the same seed in deterministic mode: the weights agree bit for bit.
std::vector<Tensor> train_once(uint64_t seed, const Tensor& x, const Tensor& y,
                               const Tensor& tokens) {
  manual_seed(seed);
  auto cnn = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(3, 16, 3, nn::ConvOptions{.padding = 1}),
      std::make_shared<nn::BatchNorm2d>(16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(3, 1), std::make_shared<nn::Conv2d>(16, 16, 3),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::AdaptiveAvgPool2d>(2),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(64, 10)});
  auto emb = std::make_shared<nn::Embedding>(11, 10);
  cnn->to(cuda0());
  emb->to(cuda0());
  std::vector<Tensor> params = cnn->parameters();
  for (const Tensor& p : emb->parameters()) params.push_back(p);
  optim::AdamW opt(params, {.lr = 1e-2});
  for (int step = 0; step < 5; ++step) {
    opt.zero_grad();
    // The embedding's rows (few, heavily repeated) join the logits.
    Tensor logits = add(cnn->forward(x), mean(emb->forward(tokens), {1}));
    cross_entropy(logits, y).backward();
    opt.step();
  }
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.detach().to(Device::cpu()));
  return out;
}

TEST(CudaDeterminism, TwoTrainingRunsGiveBitwiseIdenticalWeights) {
  GRADUS_REQUIRE_GPU();
  DeterministicGuard on;
  const uint64_t seed = testing::fresh_seed();
  const Tensor x = rnd({32, 3, 16, 16}, DType::f32).to(cuda0());
  const Tensor y = rnd_int({32}, DType::i64, 0, 10).to(cuda0());
  const Tensor tokens = rnd_int({32, 40}, DType::i64, 0, 11).to(cuda0());
  const std::vector<Tensor> a = train_once(seed, x, y, tokens);
  const std::vector<Tensor> b = train_once(seed, x, y, tokens);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(identical(a[i], b[i])) << "parameter " << i << " differs between the runs";
  }
}

}  // namespace
}  // namespace gradus
