// Activation checkpointing: what it saves and what it costs on a 16-block network.
//
//   build/examples/example_checkpoint_memory [mlp|cnn] [blocks=16] [width] [batch] [steps=5]
//
// mlp: blocks of Linear(width, width) + ReLU (width 256, batch 8192).
// cnn: blocks of Conv2d(width, width, 3x3, padding 1) + BatchNorm2d + ReLU on 32x32 maps
//      (width 16, batch 64).
// Trains the same network with Adam, once plainly and once with Sequential::checkpoint_every(k)
// for segments of 1, 2 and 4 blocks, and prints, for each, the peak memory CPU tensors held
// during a step (host::memory_stats) and the median step time. Checkpointing keeps only each
// segment's input in forward and recomputes the segment in backward.
#include <gradus/gradus.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) try {
  using namespace gradus;
  const std::string kind = argc > 1 ? argv[1] : "mlp";
  if (kind != "mlp" && kind != "cnn") {
    std::fprintf(stderr, "usage: %s [mlp|cnn] [blocks] [width] [batch] [steps]\n", argv[0]);
    return 2;
  }
  const bool cnn = kind == "cnn";
  const int blocks = argc > 2 ? std::atoi(argv[2]) : 16;
  const int64_t width = argc > 3 ? std::atoll(argv[3]) : (cnn ? 16 : 256);
  const int64_t batch = argc > 4 ? std::atoll(argv[4]) : (cnn ? 64 : 8192);
  const int steps = argc > 5 ? std::atoi(argv[5]) : 5;
  const int per_block = cnn ? 3 : 2;  // children per block
  std::printf("%s: %d blocks of %s, width %lld, batch %lld, Adam, %d threads\n", kind.c_str(),
              blocks, cnn ? "Conv2d 3x3 + BatchNorm2d + ReLU" : "Linear + ReLU",
              static_cast<long long>(width), static_cast<long long>(batch), get_num_threads());
  double plain_peak = 0, plain_ms = 0;
  for (int64_t every : {0, 1, 2, 4}) {
    manual_seed(0);
    auto net = std::make_shared<nn::Sequential>();
    for (int i = 0; i < blocks; ++i) {
      if (cnn) {
        net->push_back(
            std::make_shared<nn::Conv2d>(width, width, 3, nn::ConvOptions{.padding = 1}));
        net->push_back(std::make_shared<nn::BatchNorm2d>(width));
      } else {
        net->push_back(std::make_shared<nn::Linear>(width, width));
      }
      net->push_back(std::make_shared<nn::ReLU>());
    }
    net->checkpoint_every(per_block * every);  // k blocks
    optim::Adam opt(net->parameters(), {.lr = 1e-4});
    const Tensor x = cnn ? randn({batch, width, 32, 32}) : randn({batch, width});
    std::vector<double> ms;
    size_t peak = 0;
    for (int s = 0; s < steps + 2; ++s) {
      host::reset_peak_memory();
      const auto t0 = std::chrono::steady_clock::now();
      opt.zero_grad();
      const Tensor y = (*net)(x);
      mean(mul(y, y)).backward();
      opt.step();
      const double t =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (s >= 2) {  // after Adam's state exists
        ms.push_back(t);
        peak = std::max(peak, host::memory_stats().peak_allocated_bytes);
      }
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double peak_mib = static_cast<double>(peak) / (1 << 20);
    if (every == 0) {
      plain_peak = peak_mib;
      plain_ms = med;
      std::printf("plain                 peak %8.1f MiB  step %8.2f ms\n", peak_mib, med);
    } else {
      std::printf("checkpoint every %lld  peak %8.1f MiB (%+.0f%%)  step %8.2f ms (%+.0f%%)\n",
                  static_cast<long long>(every), peak_mib, 100 * (peak_mib / plain_peak - 1), med,
                  100 * (med / plain_ms - 1));
    }
  }
  return 0;
} catch (const gradus::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
