// Fused attention vs the composite it replaces (matmul, causal mask, softmax, matmul): time and
// peak tensor memory of forward + backward on the CPU.
//
//   build/examples/example_attention_memory [T ...]        (default: 256 1024)
//
// B = 4 sequences, H = 4 heads of 64 (width 256), causal, float32, random inputs. Times are the
// median of 5 alternating runs; peak memory is what tensors held above the inputs
// (host::memory_stats), the composite's dominated by its [B, H, T, T] scores and probabilities.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gradus/gradus.h"

using namespace gradus;

namespace {

Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t t = q.size(-2);
  Tensor s = mul(matmul(q, k.transpose(-2, -1)), 1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  s = masked_fill(s, gt(triu(ones({t, t}), 1), 0.5), -INFINITY);
  return matmul(softmax(s, -1), v);
}

struct Run {
  double ms;
  double peak_mib;
};

template <typename Fn>
Run measure(const Fn& fn, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w) {
  const size_t before = host::memory_stats().allocated_bytes;
  host::reset_peak_memory();
  const auto t0 = std::chrono::steady_clock::now();
  sum(mul(fn(q, k, v), w)).backward();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const double peak = static_cast<double>(host::memory_stats().peak_allocated_bytes - before);
  return {ms, peak / (1 << 20)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> lengths;
  for (int i = 1; i < argc; ++i) lengths.push_back(std::atoll(argv[i]));
  if (lengths.empty()) lengths = {256, 1024};
  const int64_t b = 4, h = 4, d = 64;
  std::printf("%6s %14s %14s %16s %16s\n", "T", "fused ms", "composite ms", "fused peak MiB",
              "composite MiB");
  for (int64_t t : lengths) {
    Tensor q = randn({b, h, t, d}).set_requires_grad();
    Tensor k = randn({b, h, t, d}).set_requires_grad();
    Tensor v = randn({b, h, t, d}).set_requires_grad();
    const Tensor w = randn({b, h, t, d});
    auto fused = [](const Tensor& a, const Tensor& c, const Tensor& e) {
      AttentionOptions o;
      o.causal = true;
      return scaled_dot_product_attention(a, c, e, o);
    };
    std::vector<double> fm, cm;
    double fp = 0, cp = 0;
    for (int r = 0; r < 5; ++r) {
      const Run a = measure(fused, q, k, v, w);
      const Run c = measure(composite, q, k, v, w);
      fm.push_back(a.ms);
      cm.push_back(c.ms);
      fp = a.peak_mib;
      cp = c.peak_mib;
    }
    std::printf("%6lld %14.2f %14.2f %16.2f %16.2f\n", static_cast<long long>(t), median(fm),
                median(cm), fp, cp);
  }
  return 0;
}
