// End to end: the default MLP learns Fashion-MNIST through the library's whole stack (IDX reader,
// DataLoader with a worker, Module, cross_entropy, backward, Adam). 5000 training images and
// 2 epochs take a few seconds on 2 cores; chance accuracy is 0.1.
#include <filesystem>

#include "gradus/nn/models.h"
#include "gradus/optim/adam.h"
#include "support/test_util.h"

namespace gradus {
namespace {

// Test loss and accuracy of `model` on the whole dataset.
std::pair<double, double> evaluate(nn::Module& model, const data::TensorDataset& ds) {
  NoGradGuard no_grad;
  model.eval();
  const Tensor logits = model(ds.inputs());
  const double loss = cross_entropy(logits, ds.targets()).item();
  const Tensor pred = argmax(logits, 1);
  const std::vector<int64_t> p = pred.to_vector<int64_t>();
  const std::vector<int64_t> y = ds.targets().to_vector<int64_t>();
  int64_t correct = 0;
  for (size_t i = 0; i < y.size(); ++i) correct += p[i] == y[i];
  model.train();
  return {loss, static_cast<double>(correct) / static_cast<double>(y.size())};
}

TEST(EndToEnd, MlpLearnsFashionMnist) {
  if (!std::filesystem::is_directory(data::kDefaultFashionMnistDir)) {
    GTEST_SKIP() << "skipped: " << data::kDefaultFashionMnistDir
                 << " is absent (install Debian's dataset-fashion-mnist)";
  }
  const uint64_t seed = testing::fresh_seed();
  SCOPED_TRACE(seed);
  manual_seed(seed);
  auto train = data::load_fashion_mnist(data::kDefaultFashionMnistDir, true, 5000);
  auto test = data::load_fashion_mnist(data::kDefaultFashionMnistDir, false, 1000);
  ASSERT_EQ(train->size(), 5000);
  ASSERT_EQ(test->size(), 1000);

  std::shared_ptr<nn::Module> model = nn::make_model("mlp");
  optim::Adam optimizer(model->parameters(), {.lr = 1e-3});
  data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = seed});
  const auto [loss0, acc0] = evaluate(*model, *test);

  std::vector<double> losses;
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (data::Example& batch : loader) {
      optimizer.zero_grad();
      const Tensor loss = cross_entropy((*model)(batch.input), batch.target);
      loss.backward();
      optimizer.step();
      losses.push_back(loss.item());
      ASSERT_TRUE(std::isfinite(losses.back())) << "step " << losses.size();
    }
  }
  ASSERT_EQ(losses.size(), 2u * 79u);  // ceil(5000 / 64) batches per epoch
  auto mean_of = [&](size_t first, size_t count) {
    double s = 0;
    for (size_t i = first; i < first + count; ++i) s += losses[i];
    return s / static_cast<double>(count);
  };
  const double early = mean_of(0, 10), late = mean_of(losses.size() - 10, 10);
  EXPECT_LT(late, 0.6 * early) << "training loss did not fall: " << early << " -> " << late;

  const auto [loss1, acc1] = evaluate(*model, *test);
  EXPECT_LT(loss1, 0.6 * loss0) << "test loss " << loss0 << " -> " << loss1;
  EXPECT_GT(acc1, 0.7) << "test accuracy " << acc0 << " -> " << acc1;
}

}  // namespace
}  // namespace gradus
