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

#include "commands.h"
#include "gradus/gradus.h"
#include "gradus/nn/models.h"
#include "gradus/optim/adam.h"

namespace gradus::cli {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// Waits for the device by reading one element to the host.
void sync(const Tensor& t) {
  (void)t.reshape({-1}).slice(0, 0, 1).item();
}

int bench_gemm(const BenchOptions& o, Device device) {
  const int64_t n = o.gemm;
  const Tensor a = randn({n, n}, {DType::f32, device});
  const Tensor b = randn({n, n}, {DType::f32, device});
  NoGradGuard no_grad;
  Tensor c;
  for (int i = 0; i < std::max(o.warmup, 1); ++i) c = matmul(a, b);
  sync(c);
  std::vector<double> times;
  for (int r = 0; r < o.repeats; ++r) {
    for (int s = 0; s < o.steps; ++s) {
      const auto t0 = Clock::now();
      c = matmul(a, b);
      sync(c);
      times.push_back(ms_since(t0));
    }
  }
  const double ms = median(times);
  const double gflops = 2.0 * static_cast<double>(n) * n * n / (ms * 1e-3) / 1e9;
  const nlohmann::ordered_json out = {{"benchmark", "sgemm"},
                                      {"n", n},
                                      {"threads", get_num_threads()},
                                      {"device", device.str()},
                                      {"ms", ms},
                                      {"gflops", gflops},
                                      {"steps", o.steps},
                                      {"repeats", o.repeats}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int run_bench(const BenchOptions& o) {
  apply_threads(o.threads);
  const Device device = resolve_device(o.device);
  manual_seed(o.seed);
  if (o.gemm > 0) return bench_gemm(o, device);

  const std::string name = o.model == "mlp"         ? "mlp-bench"
                           : o.model == "mlp-large" ? "mlp-large"
                           : o.model == "cnn"       ? "cnn-bench"
                                                    : o.model;
  std::shared_ptr<nn::Module> model = nn::make_model(name);
  model->to(device);
  model->train();
  optim::Adam optimizer(model->parameters());
  const Tensor x = randn({o.batch_size, 1, 28, 28}, {DType::f32, device});
  const Tensor y = randint(0, 10, {o.batch_size}, {DType::i64, device});

  auto step = [&] {
    optimizer.zero_grad();
    const Tensor loss = cross_entropy((*model)(x), y);
    loss.backward();
    optimizer.step();
    return loss.item();  // waits for the device
  };
  for (int i = 0; i < o.warmup; ++i) step();
  std::vector<double> times;
  double last_loss = 0;
  for (int r = 0; r < o.repeats; ++r) {
    for (int s = 0; s < o.steps; ++s) {
      const auto t0 = Clock::now();
      last_loss = step();
      times.push_back(ms_since(t0));
    }
  }
  const double ms = median(times);
  // MLPs are all GEMM: forward, backward-data and backward-weight are 2*B*in*out flops each per
  // Linear, so the step's GEMM rate can be set against `gradus bench --gemm N`.
  double linear_weights = 0;
  for (const Tensor& p : model->parameters()) {
    if (p.dim() == 2) linear_weights += static_cast<double>(p.numel());
  }
  nlohmann::ordered_json out = {{"benchmark", "train_step"},
                                {"model", o.model},
                                {"model_name", name},
                                {"parameters", model->num_parameters()},
                                {"batch_size", o.batch_size},
                                {"threads", get_num_threads()},
                                {"device", device.str()},
                                {"ms_per_step", ms},
                                {"ms_per_step_mean", mean(times)},
                                {"samples_per_s", static_cast<double>(o.batch_size) / (ms * 1e-3)},
                                {"steps", o.steps},
                                {"warmup", o.warmup},
                                {"repeats", o.repeats},
                                {"final_loss", last_loss}};
  if (o.model != "cnn") {
    out["linear_gflops"] =
        6.0 * static_cast<double>(o.batch_size) * linear_weights / (ms * 1e-3) / 1e9;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace gradus::cli
