// docs/guide.md, "A training loop" and "Evaluating in batches": an MLP trained on Fashion-MNIST
// with AdamW, a cosine schedule and gradient clipping, evaluated batch by batch.
//
//   build/examples/example_guide_training [train examples=60000] [epochs=2] [data dir]
//
// Prints the loss and test accuracy per epoch and the peak memory of the evaluation.
#include <gradus/gradus.h>

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace gradus;

// [guide:evaluate]
// Accuracy of `model` on `set`, batch by batch: memory is that of one batch's forward, whatever
// the size of the set.
double evaluate(nn::Module& model, const std::shared_ptr<data::TensorDataset>& set, Device device,
                int64_t batch_size = 500) {
  NoGradGuard no_grad;  // records no graph: each activation is freed as soon as it is used
  const bool was_training = model.is_training();
  model.eval();  // dropout off, batch norm on its running statistics
  data::DataLoader loader(set, {.batch_size = batch_size, .device = device});
  double correct = 0;
  for (data::Example& batch : loader) {
    const Tensor predicted = argmax(model(batch.input), 1);
    correct += sum(eq(predicted, batch.target)).item();
  }
  model.train(was_training);
  return correct / static_cast<double>(set->size());
}
// [guide:end]

int main(int argc, char** argv) try {
  const int64_t limit = argc > 1 ? std::atoll(argv[1]) : -1;
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 2;
  const std::string dir = argc > 3 ? argv[3] : data::kDefaultFashionMnistDir;
  // [guide:train]
  manual_seed(0);  // parameters, dropout and shuffling all draw from seeded Philox streams
  const Device device = Device::best();  // cuda:0 when there is a GPU, else the CPU
  auto train_set = data::load_fashion_mnist(dir, /*train=*/true, limit);
  auto test_set = data::load_fashion_mnist(dir, /*train=*/false);

  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.1),
      std::make_shared<nn::Linear>(256, 10)});
  model->to(device);  // before the optimizer is built: it keeps its state next to each parameter

  optim::AdamW optimizer(model->parameters(), {.lr = 2e-3, .weight_decay = 0.01});
  data::DataLoader loader(train_set,
                          {.batch_size = 128, .shuffle = true, .seed = 0, .device = device});
  optim::CosineAnnealingLR schedule(optimizer, /*T_max=*/epochs * loader.size());

  for (int epoch = 1; epoch <= epochs; ++epoch) {
    model->train();
    Tensor loss_sum = zeros({}, {.device = device});  // summed on the device, read once per epoch
    for (data::Example& batch : loader) {
      optimizer.zero_grad();
      Tensor loss = cross_entropy((*model)(batch.input), batch.target);
      loss.backward();
      optim::clip_grad_norm(model->parameters(), /*max_norm=*/1.0);
      optimizer.step();
      schedule.step();  // per step: T_max counts steps
      loss_sum = add(loss_sum, loss.detach());
    }
    std::printf("epoch %d: train loss %.4f, test accuracy %.4f\n", epoch,
                loss_sum.item() / static_cast<double>(loader.size()),
                evaluate(*model, test_set, device));
  }
  // [guide:end]
  // Evaluating all 10,000 test images in one forward holds every image's activations at once;
  // in batches of 500 the peak is that of one batch. Measured on the CPU's allocator.
  if (device.is_cpu()) {
    NoGradGuard no_grad;
    model->eval();
    const size_t base = host::memory_stats().allocated_bytes;
    const auto peak_of = [&](const auto& run) {
      host::reset_peak_memory();
      run();
      return static_cast<double>(host::memory_stats().peak_allocated_bytes - base) / (1 << 20);
    };
    const double whole = peak_of([&] { argmax((*model)(test_set->inputs()), 1); });
    const double batched = peak_of([&] { evaluate(*model, test_set, device); });
    std::printf("evaluation peak: %.1f MiB in one forward, %.1f MiB in batches of 500\n", whole,
                batched);
  }
  return 0;
} catch (const gradus::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
