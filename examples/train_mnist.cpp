// Train an MLP on Fashion-MNIST (Debian: sudo apt-get install dataset-fashion-mnist) and print
// the test accuracy after each epoch.
#include <gradus/gradus.h>
#include <cstdio>

int main() try {
  using namespace gradus;
  manual_seed(0);
  auto train = data::load_fashion_mnist(data::kDefaultFashionMnistDir, /*train=*/true);
  auto test = data::load_fashion_mnist(data::kDefaultFashionMnistDir, /*train=*/false);
  auto model = nn::make_model("mlp");  // 784-256-128-10
  optim::Adam optimizer(model->parameters(), {.lr = 1e-3});
  data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .seed = 0});
  for (int epoch = 1; epoch <= 5; ++epoch) {
    for (data::Example& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = cross_entropy((*model)(batch.input), batch.target);
      loss.backward();
      optimizer.step();
    }
    NoGradGuard no_grad;
    model->eval();
    Tensor correct = eq(argmax((*model)(test->inputs()), 1), test->targets());
    std::printf("epoch %d: test accuracy %.4f\n", epoch, correct.to(DType::f32).mean().item());
    model->train();
  }
  return 0;
} catch (const gradus::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
