// Fine-tuning: load a CNN's weights, freeze its convolutional part, train only the classifier head.
//
//   build/examples/example_fine_tune [weights.safetensors] [steps=300]
//
// Without a weights file it first "pretrains" the small CNN on Fashion-MNIST's first five classes
// (T-shirt .. coat) and saves the weights to fine_tune_pretrained.safetensors. Then it loads them
// into a fresh CNN, freezes the convolutions and their batch norms (kept in eval mode), and
// trains the head on the other five classes (sandal .. ankle boot). It prints the accuracy on
// those classes before and after, the step time frozen vs not, and checks that the frozen
// weights did not change by a single bit. The same from the CLI:
//   gradus train --model cnn --init-from w.safetensors --freeze 0. --freeze 1. --freeze 4.
//                --freeze 5.
#include <gradus/gradus.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using namespace gradus;

// The examples of `set` whose label is in [lo, hi).
std::shared_ptr<data::TensorDataset> classes(const data::TensorDataset& set, int64_t lo,
                                             int64_t hi) {
  std::vector<int64_t> keep;
  const std::vector<int64_t> labels = set.targets().to_vector<int64_t>();
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= lo && labels[i] < hi) keep.push_back(static_cast<int64_t>(i));
  }
  const Tensor idx = from_vector(keep, {static_cast<int64_t>(keep.size())}, {.dtype = DType::i64});
  return std::make_shared<data::TensorDataset>(index_select(set.inputs(), 0, idx),
                                               index_select(set.targets(), 0, idx));
}

double accuracy(nn::Module& model, const data::TensorDataset& test) {
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const Tensor correct = eq(argmax(model(test.inputs()), 1), test.targets());
  model.train(was_training);
  return correct.to(DType::f32).mean().item();
}

// Trains `steps` Adam steps on the parameters that require grad; returns the median step in ms.
double train(nn::Module& model, const std::shared_ptr<data::TensorDataset>& set, int steps) {
  optim::Adam optimizer(model.trainable_parameters(), {.lr = 1e-3});
  data::DataLoader loader(set, {.batch_size = 128, .shuffle = true, .seed = 1});
  std::vector<double> ms;
  while (static_cast<int>(ms.size()) < steps) {
    for (data::Example& batch : loader) {
      const auto t0 = std::chrono::steady_clock::now();
      optimizer.zero_grad();
      cross_entropy(model(batch.input), batch.target).backward();
      optimizer.step();
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (static_cast<int>(ms.size()) == steps) break;
    }
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string given = argc > 1 ? argv[1] : "";
  const int steps = argc > 2 ? std::atoi(argv[2]) : 300;
  const auto train_set = data::load_fashion_mnist(data::kDefaultFashionMnistDir, true);
  const auto test_set = data::load_fashion_mnist(data::kDefaultFashionMnistDir, false);
  std::string weights = given;
  if (weights.empty()) {
    manual_seed(0);
    auto base = nn::small_cnn();
    const double ms = train(*base, classes(*train_set, 0, 5), steps);
    weights = "fine_tune_pretrained.safetensors";
    io::save_module(*base, weights);
    std::printf("pretrained on classes 0-4: %d steps (%.1f ms/step), accuracy %.4f; saved %s\n",
                steps, ms, accuracy(*base, *classes(*test_set, 0, 5)), weights.c_str());
  }

  const auto new_train = classes(*train_set, 5, 10);
  const auto new_test = classes(*test_set, 5, 10);
  manual_seed(1);
  auto model = nn::small_cnn();
  io::load_module(*model, weights);
  // The convolutions and their batch norms: children 0, 1 (conv, bn) and 4, 5.
  int64_t frozen_count = 0;
  for (const char* prefix : {"0.", "1.", "4.", "5."}) {
    frozen_count += model->freeze(prefix, /*keep_norm_eval=*/true);
  }
  std::vector<std::pair<std::string, Tensor>> frozen_before;
  for (const auto& [name, p] : model->named_parameters()) {
    if (!p.requires_grad()) frozen_before.emplace_back(name, p.clone());
  }
  std::printf("fine-tuning on classes 5-9 with %lld frozen tensors; accuracy before: %.4f\n",
              static_cast<long long>(frozen_count), accuracy(*model, *new_test));
  const double frozen_ms = train(*model, new_train, steps);
  std::printf("after %d steps of the head: accuracy %.4f (%.1f ms/step)\n", steps,
              accuracy(*model, *new_test), frozen_ms);
  for (const auto& [name, before] : frozen_before) {
    const Tensor now = model->state_dict().at(name);
    if (std::memcmp(now.raw_data(), before.raw_data(),
                    static_cast<size_t>(before.numel()) * before.element_size()) != 0) {
      std::fprintf(stderr, "error: frozen parameter %s changed\n", name.c_str());
      return 1;
    }
  }
  std::printf("frozen parameters bitwise unchanged: %zu tensors\n", frozen_before.size());

  // The same steps with nothing frozen, for the step-time ratio.
  manual_seed(1);
  auto full = nn::small_cnn();
  io::load_module(*full, weights);
  const double full_ms = train(*full, new_train, std::min(steps, 50));
  std::printf("step time frozen / unfrozen: %.2f (%.1f vs %.1f ms)\n", frozen_ms / full_ms,
              frozen_ms, full_ms);
  return 0;
} catch (const gradus::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
