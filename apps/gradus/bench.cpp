// gradus bench: times whole training steps (forward, cross_entropy, backward, Adam step) on fixed
// random inputs after a warm-up, or an NxN float32 matmul, and prints ONE JSON line.
//
// Each timed step ends by reading the loss to the host, which waits for the device, so a step's
// time is its full latency. The reported ms_per_step is the median over all timed steps of all
// repeats (robust to a stray slow step); ms_per_step_mean is given too.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "gradus/gradus.h"
#include "gradus/nn/models.h"
#include "gradus/optim/adam.h"
#include "gradus/train/profiling.h"
#include "gradus/train/step_graph.h"
#include "language_model.h"
#include "run_monitor.h"
#include "timing.h"

namespace gradus::cli {

namespace {

// Distinct random batches a training-step benchmark cycles through (bench/compare_pytorch.py
// uses the same number).
constexpr int64_t kBenchBatches = 16;

// Waits for the device by reading one element to the host.
void sync(const Tensor& t) {
  (void)t.reshape({-1}).slice(0, 0, 1).item();
}

int bench_gemm(const BenchOptions& o, Device device) {
  const int64_t n = o.gemm;
  const DType dtype = dtype_from_name(o.gemm_dtype);
  const Tensor a = randn({n, n}, {DType::f32, device}).to(dtype);
  const Tensor b = randn({n, n}, {DType::f32, device}).to(dtype);
  NoGradGuard no_grad;
  const std::vector<double> times = time_steps(std::max(o.warmup, 1), o.steps, o.repeats, [&] {
    const Tensor c = matmul(a, b);
    sync(c);
  });
  const double ms = median(times);
  const double gflops = 2.0 * static_cast<double>(n) * n * n / (ms * 1e-3) / 1e9;
  const nlohmann::ordered_json out = {{"benchmark", "gemm"},        {"n", n},
                                      {"dtype", dtype_name(dtype)}, {"threads", get_num_threads()},
                                      {"device", device.str()},     {"ms", ms},
                                      {"gflops", gflops},           {"steps", o.steps},
                                      {"repeats", o.repeats}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

// Median time of a whole training step (forward, cross-entropy, backward, Adam) of a bench model.
struct StepTiming {
  double median_ms = 0;
  double mean_ms = 0;
  double last_loss = 0;
  std::shared_ptr<nn::Module> model;
  monitor::Totals energy_window;  // the timed steps' readings (with `monitor`)
};

// Energy for the bench JSON: NVML (the counter, else the power integral) on a GPU, RAPL on the
// CPU. Without a source on the CPU no thread runs, so the timing is undisturbed.
std::unique_ptr<monitor::DeviceMonitor> make_energy_monitor(Device device) {
  const bool rapl = monitor::RaplReader().available();
  return train::make_device_monitor(device, device.is_cuda() || rapl
                                                ? std::chrono::milliseconds(100)
                                                : std::chrono::milliseconds(0));
}

std::string bench_model_name(const std::string& model) {
  return model == "mlp" ? "mlp-bench" : model == "cnn" ? "cnn-bench" : model;
}

// amp: the step runs as `gradus train --amp` runs it (autocast; f16 adds the loss scaler).
StepTiming time_training_step(const std::string& model_name, int64_t batch_size, Device device,
                              int warmup, int steps, int repeats,
                              std::optional<DType> amp = std::nullopt,
                              monitor::DeviceMonitor* monitor = nullptr, bool cuda_graph = false) {
  StepTiming result;
  result.model = nn::make_model(model_name);
  nn::Module& model = *result.model;
  model.to(device);
  model.train();
  optim::Adam optimizer(model.parameters());
  amp::GradScaler scaler({.enabled = amp == DType::f16});
  // A pool of distinct random batches, cycled: on one repeated batch the large MLP memorises its
  // labels within a few dozen steps, the loss reaches 0 and the step would be timed on vanishing
  // (denormal) gradients, which no real run sees.
  std::vector<Tensor> xs, ys;
  for (int64_t i = 0; i < kBenchBatches; ++i) {
    xs.push_back(randn({batch_size, 1, 28, 28}, {DType::f32, device}));
    ys.push_back(randint(0, 10, {batch_size}, {DType::i64, device}));
  }
  size_t next = 0;
  // --cuda-graph: as `gradus train --cuda-graph` runs it (step_graph.h).
  if (cuda_graph) optimizer.set_capturable(true);
  train::StepGraph graph(cuda_graph, train::kGraphWarmupSteps, "gradus bench");
  auto train_step = [&](const Tensor& x, const Tensor& y) {
    optimizer.zero_grad(/*set_to_none=*/!cuda_graph);
    Tensor loss;
    {
      amp::Autocast autocast(amp.value_or(DType::bf16), amp.has_value());
      loss = cross_entropy(model(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(optimizer);
    scaler.update();
    return loss;
  };
  auto step = [&] {
    const Tensor& x = xs[next % xs.size()];
    const Tensor& y = ys[next % ys.size()];
    ++next;
    return graph.run(x, y, train_step).item();  // waits for the device
  };
  // The capture itself is not timed.
  if (cuda_graph) warmup = std::max<int>(warmup, static_cast<int>(train::kGraphWarmupSteps) + 2);
  const std::vector<double> times = time_steps(
      warmup, steps, repeats, [&] { result.last_loss = step(); },
      [&] {
        if (monitor) monitor->take_window();
      });
  if (monitor) result.energy_window = monitor->take_window();
  result.median_ms = median(times);
  result.mean_ms = mean(times);
  return result;
}

// The "why GPUs" table: the three bench models on the CPU and on every GPU, measured.
int compare_devices(const BenchOptions& o) {
  std::vector<Device> devices = {Device::cpu()};
  for (int i = 0; i < cuda_device_count(); ++i) devices.push_back(Device::cuda(i));
  const std::pair<const char*, int64_t> runs[] = {{"mlp", 100}, {"mlp-large", 256}, {"cnn", 64}};
  std::printf("%-10s %6s %-8s %12s %14s %10s\n", "model", "batch", "device", "ms/step", "samples/s",
              "vs cpu");
  for (const auto& [model, batch] : runs) {
    double cpu_ms = 0;
    for (const Device& device : devices) {
      const StepTiming t =
          time_training_step(bench_model_name(model), batch, device, o.warmup, o.steps, o.repeats);
      if (device.is_cpu()) cpu_ms = t.median_ms;
      std::printf("%-10s %6lld %-8s %12.3f %14.0f %9.2fx\n", model, static_cast<long long>(batch),
                  device.str().c_str(), t.median_ms,
                  static_cast<double>(batch) / (t.median_ms * 1e-3), cpu_ms / t.median_ms);
    }
  }
  if (devices.size() == 1) {
    std::printf("(no CUDA device: GPU rows need a machine with a GPU and a CUDA build)\n");
  }
  return 0;
}

}  // namespace

namespace {

// A language model's training step (AdamW, like `gradus train --model gpt|llama`) on random
// token windows.
int bench_language_model(const BenchOptions& o, Device device) {
  const LanguageModelSpec spec = spec_from_shape(o.model, o.gpt, o.vocab_size);
  const std::shared_ptr<nn::Module> made = spec.make();
  nn::Module& model = *made;
  model.to(device);
  model.train();
  optim::AdamW optimizer(model.parameters());
  std::vector<Tensor> xs, ys;
  for (int64_t i = 0; i < kBenchBatches; ++i) {
    xs.push_back(randint(0, o.vocab_size, {o.batch_size, o.gpt.context}, {DType::i64, device}));
    ys.push_back(randint(0, o.vocab_size, {o.batch_size, o.gpt.context}, {DType::i64, device}));
  }
  const std::optional<DType> amp = amp_option(o.amp);
  GRADUS_CHECK(amp != DType::f16, ValueError, "bench: --model ", o.model,
               " supports --amp off or bf16");
  size_t next = 0;
  double loss_value = 0;
  const std::unique_ptr<monitor::DeviceMonitor> energy = make_energy_monitor(device);
  auto step = [&] {
    const size_t i = next++ % xs.size();
    Tensor loss;
    {
      amp::Autocast autocast(amp.value_or(DType::bf16), amp.has_value());
      const Tensor logits = model(xs[i]);
      loss = cross_entropy(logits.reshape({-1, o.vocab_size}), ys[i].reshape({-1}));
    }
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();
    return loss.item();
  };
  const std::vector<double> times = time_steps(
      o.warmup, o.steps, o.repeats, [&] { loss_value = step(); }, [&] { energy->take_window(); });
  const monitor::Totals window = energy->take_window();
  const double ms = median(times);
  nlohmann::ordered_json out = {
      {"benchmark", "train_step"},
      {"model", o.model},
      {"parameters", model.num_parameters()},
      {"layers", o.gpt.layers},
      {"heads", o.gpt.heads},
      {"kv_heads", o.model == "llama" ? spec.llama.n_kv_head : o.gpt.heads},
      {"width", o.gpt.width},
      {"context", o.gpt.context},
      {"vocab_size", o.vocab_size},
      {"batch_size", o.batch_size},
      {"threads", get_num_threads()},
      {"device", device.str()},
      {"amp", o.amp},
      {"ms_per_step", ms},
      {"ms_per_step_mean", mean(times)},
      {"tokens_per_s", static_cast<double>(o.batch_size * o.gpt.context) / (ms * 1e-3)},
      {"steps", o.steps},
      {"warmup", o.warmup},
      {"repeats", o.repeats},
      {"final_loss", loss_value}};
  add_energy(out, window, *energy, static_cast<int64_t>(o.steps) * o.repeats, o.batch_size);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int run_bench(const BenchOptions& o) {
  // (Before every mode: --dist, the image models and the GPT would ignore them.)
  GRADUS_CHECK(
      o.model == "llama" || (o.gpt.kv_heads == 0 && o.gpt.ffn_width == 0 &&
                             o.gpt.rope_theta == GptShape{}.rope_theta && !o.gpt.tie_embeddings),
      ValueError,
      "bench: --kv-heads, --ffn-width, --rope-theta and --tie-embeddings apply to --model "
      "llama");
  if (!o.dist.empty()) return run_bench_dist(o);
  GRADUS_CHECK(!o.no_overlap && !o.no_prefetch, ValueError, "bench: --",
               o.no_overlap ? "no-overlap" : "no-prefetch",
               " applies to --dist runs (ddp, and zero2|fsdp) only");
  communication_dtype("--gather-dtype", o.gather_dtype, o.dist);  // (refused without --dist)
  communication_dtype("--reduce-dtype", o.reduce_dtype, o.dist);
  apply_threads(o.threads);
  manual_seed(o.seed);
  if (o.compare_devices) return compare_devices(o);
  const Device device = resolve_device(o.device);
  if (o.roofline) return bench_roofline(o, device);
  if (o.gemm > 0) return bench_gemm(o, device);
  if (o.model == "gpt" || o.model == "llama") return bench_language_model(o, device);

  const std::string name = bench_model_name(o.model);
  const std::optional<DType> amp = amp_option(o.amp);
  GRADUS_CHECK(!o.cuda_graph || device.is_cuda(), ValueError,
               "bench: --cuda-graph needs a CUDA device, and the bench runs on ", device.str());
  GRADUS_CHECK(!o.cuda_graph || amp != DType::f16, ValueError,
               "bench: --cuda-graph is not supported with --amp f16 (the loss scaler decides on "
               "the host whether to skip each step)");
  const std::unique_ptr<monitor::DeviceMonitor> energy = make_energy_monitor(device);
  const StepTiming timing = time_training_step(name, o.batch_size, device, o.warmup, o.steps,
                                               o.repeats, amp, energy.get(), o.cuda_graph);
  const nn::Module& model = *timing.model;
  const double ms = timing.median_ms;
  // MLPs are all GEMM: per Linear, forward, backward-data and backward-weight are 2*B*in*out
  // flops each, except that the first layer's input needs no gradient. The step's GEMM rate can
  // then be set against `gradus bench --gemm N`.
  double linear_weights = 0, first_layer = -1;
  for (const Tensor& p : model.parameters()) {
    if (p.dim() != 2) continue;
    linear_weights += static_cast<double>(p.numel());
    if (first_layer < 0) first_layer = static_cast<double>(p.numel());
  }
  nlohmann::ordered_json out = {{"benchmark", "train_step"},
                                {"model", o.model},
                                {"model_name", name},
                                {"parameters", model.num_parameters()},
                                {"batch_size", o.batch_size},
                                {"threads", get_num_threads()},
                                {"device", device.str()},
                                {"amp", o.amp},
                                {"cuda_graph", o.cuda_graph},
                                {"ms_per_step", ms},
                                {"ms_per_step_mean", timing.mean_ms},
                                {"samples_per_s", static_cast<double>(o.batch_size) / (ms * 1e-3)},
                                {"steps", o.steps},
                                {"warmup", o.warmup},
                                {"repeats", o.repeats},
                                {"final_loss", timing.last_loss}};
  if (o.model.starts_with("mlp")) {
    out["linear_gflops"] = 2.0 * static_cast<double>(o.batch_size) *
                           (3.0 * linear_weights - first_layer) / (ms * 1e-3) / 1e9;
  }
  // Energy of the timed steps (all repeats) per step and per example; null with a note when
  // nothing measures it (no NVML on a GPU, RAPL unreadable on the CPU).
  add_energy(out, timing.energy_window, *energy, static_cast<int64_t>(o.steps) * o.repeats,
             o.batch_size);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace gradus::cli
