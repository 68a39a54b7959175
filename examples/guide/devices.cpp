// docs/guide.md, "Devices": where tensors and modules live and how they move.
//
//   build/examples/example_guide_devices [cpu|cuda|cuda:N|auto]
//
// Runs one training step of a small CNN on the chosen device (default: auto, the GPU when there
// is one) and checks its loss against the same step on the CPU.
#include <gradus/core/cuda.h>  // gradus::cuda: devices, memory, streams
#include <gradus/gradus.h>

#include <cmath>
#include <cstdio>
#include <string>

using namespace gradus;

namespace {

double one_step(Device device) {
  manual_seed(0);
  auto model = nn::small_cnn();
  // [guide:module_to]
  model->to(device);  // parameters and buffers move in place: existing handles stay valid
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  // [guide:end]
  manual_seed(1);
  // [guide:tensor_to]
  Tensor x = randn({16, 1, 28, 28});  // created on the CPU (TensorOptions::device)
  Tensor y = randint(0, 10, {16});
  x = x.to(device);  // a copy on the device (the same handle when already there)
  y = y.to(device);
  Tensor loss = cross_entropy((*model)(x), y);  // inputs of an op must share a device
  loss.backward();
  optimizer.step();
  const double value = loss.item();  // item() copies to the host (and waits for the GPU)
  // [guide:end]
  return value;
}

// Ten SGD steps of a small CNN replayed as a CUDA graph (docs/guide.md, "CUDA graphs"); returns
// the last loss.
double graph_steps(Device device) {
  manual_seed(0);
  auto model = nn::small_cnn();
  model->to(device);
  optim::SGD optimizer(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  // [guide:graph]
  optimizer.set_capturable(true);  // lr and step count read from device memory
  Tensor input = randn({16, 1, 28, 28}, {.device = device});  // the graph reads these two:
  Tensor target = randint(0, 10, {16}, {.dtype = DType::i64, .device = device});  // refill them
  Tensor loss = zeros({}, {.device = device});  // and writes this one
  auto step = [&] {
    optimizer.zero_grad(/*set_to_none=*/false);  // gradients stay where the capture saw them
    Tensor l = cross_entropy((*model)(input), target);
    l.backward();
    optimizer.step();
    loss.copy_(l.detach());  // results go into tensors made before the capture
  };
  step();  // warm-up: gradients, optimizer state and workspaces now exist
  cuda::Graph graph;
  graph.capture(step);  // records the step's kernels; runs nothing
  for (int i = 0; i < 10; ++i) {
    input.copy_(randn({16, 1, 28, 28}, {.device = device}));  // the next batch
    target.copy_(randint(0, 10, {16}, {.dtype = DType::i64, .device = device}));
    graph.replay();  // the whole step, one launch
  }
  // [guide:end]
  return loss.item();
}

}  // namespace

int main(int argc, char** argv) try {
  // [guide:choose]
  std::printf("GPUs: %d\n", cuda::device_count());  // 0 without a GPU or a CUDA build
  const Device device = Device::parse(argc > 1 ? argv[1] : "auto");  // "auto" = Device::best()
  // [guide:end]
  const double on_device = one_step(device);
  const double on_cpu = one_step(Device::cpu());
  std::printf("loss on %s %.6f, on cpu %.6f\n", device.str().c_str(), on_device, on_cpu);
  // [guide:memory]
  if (device.is_cuda()) {
    const cuda::MemoryStats s = cuda::memory_stats(device.index());
    std::printf("GPU peak %.1f MiB\n", static_cast<double>(s.peak_allocated) / (1 << 20));
  } else {
    const host::MemoryStats s = host::memory_stats();
    std::printf("CPU peak %.1f MiB\n", static_cast<double>(s.peak_allocated_bytes) / (1 << 20));
  }
  // [guide:end]
  if (device.is_cuda()) std::printf("loss after 10 replayed steps %.6f\n", graph_steps(device));
  return std::abs(on_device - on_cpu) < 1e-3 ? 0 : 1;
} catch (const gradus::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
