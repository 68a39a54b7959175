// Throughput of the augmenting DataLoader on the CPU: Fashion-MNIST's 60,000 training images in
// batches of 128, shuffled, each batch gathered, randomly cropped (padding 2), flipped (p 0.5)
// and normalised by the loader (what `gradus train --augment` does), with a loop that only takes
// the batches. Samples/s from the loader's own statistics, for 0, 1 and 2 workers and, for
// comparison, without augmentation.
//
//   build/examples/example_loader_throughput [DATA_DIR] [REPEATS] [EPOCHS]
//
// Each repeat runs every configuration for EPOCHS epochs (default 5: one epoch takes only tens of
// milliseconds), configurations alternating; the median over the repeats is shown.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gradus/gradus.h"

using namespace gradus;

namespace {

struct Config {
  const char* name;
  int workers;
  bool augment;
};

double samples_per_s(const std::shared_ptr<data::TensorDataset>& train, const Config& c,
                     int64_t epochs) {
  data::DataLoaderOptions o{.batch_size = 128, .shuffle = true, .seed = 1};
  o.num_workers = c.workers;
  if (c.augment) {
    o.transform = data::image_augment({.crop_padding = 2,
                                       .flip_p = 0.5,
                                       .mean = {data::kFashionMnistMean},
                                       .std = {data::kFashionMnistStd}});
  }
  data::DataLoader loader(train, o);
  int64_t checksum = 0;  // touch every batch so that nothing is optimised away
  for (int64_t e = 0; e < epochs; ++e) {
    for (data::Example& b : loader) checksum += b.input.size(0);
  }
  if (checksum != epochs * train->size()) std::abort();
  return loader.stats().samples_per_second();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : data::kDefaultFashionMnistDir;
  const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  const int epochs = argc > 3 ? std::max(1, std::atoi(argv[3])) : 5;
  // Raw [0, 1] pixels: the transform normalises, as with --augment.
  const auto train = data::load_fashion_mnist(dir, true, -1, /*normalise=*/false);
  const std::vector<Config> configs = {{"augment, 0 workers (in the loop's thread)", 0, true},
                                       {"augment, 1 worker", 1, true},
                                       {"augment, 2 workers", 2, true},
                                       {"no augmentation, 1 worker", 1, false}};
  std::vector<std::vector<double>> rates(configs.size());
  for (int r = 0; r < repeats; ++r) {
    for (size_t c = 0; c < configs.size(); ++c) {
      rates[c].push_back(samples_per_s(train, configs[c], epochs));
    }
  }
  std::printf(
      "DataLoader, Fashion-MNIST train (60000 x 1 x 28 x 28 f32), batch 128, %d threads, "
      "%d epochs x %d repeats\n",
      get_num_threads(), epochs, repeats);
  std::printf("%-44s %14s %14s %14s\n", "configuration", "median samp/s", "min", "max");
  for (size_t c = 0; c < configs.size(); ++c) {
    std::vector<double> v = rates[c];
    std::sort(v.begin(), v.end());
    std::printf("%-44s %14.0f %14.0f %14.0f\n", configs[c].name, v[v.size() / 2], v.front(),
                v.back());
  }
  return 0;
}
