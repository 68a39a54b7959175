// Shared by the data-parallel tests: a world batch every rank can rebuild, its per-rank shards,
// small f64 models and optimizers, and parameter comparisons.
#pragma once

#include <memory>
#include <string>

#include "dist/dist_test_util.h"
#include "gradus/nn/models.h"

namespace gradus::testing {

struct Batch {
  Tensor x, y;
};

// A whole-world batch, the same on every rank.
inline Batch make_batch(uint64_t seed, const Shape& x_shape, int64_t classes) {
  Batch b;
  b.x = random_tensor(x_shape, seed, -1, 1, DType::f64);
  Tensor u = random_tensor({x_shape[0]}, seed + 1, 0, static_cast<double>(classes), DType::f64);
  b.y = floor(u).to(DType::i64);
  return b;
}

inline Batch shard(const Batch& b, int rank, int size) {
  const int64_t n = b.x.size(0) / size;
  return {b.x.slice(0, rank * n, (rank + 1) * n).contiguous(),
          b.y.slice(0, rank * n, (rank + 1) * n).contiguous()};
}

inline std::shared_ptr<nn::Module> build(const std::string& name, uint64_t seed) {
  manual_seed(seed);
  nn::ModelSpec spec{.in_channels = 1, .image_size = 8, .num_classes = 5};
  auto m = nn::make_model(name, spec);
  m->to(DType::f64);
  return m;
}

inline std::unique_ptr<optim::Optimizer> make_opt(const std::string& kind,
                                                  std::vector<Tensor> params) {
  if (kind == "sgd") {
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3});
  }
  return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 1e-2});
}
inline std::unique_ptr<optim::Optimizer> make_opt(const std::string& kind, nn::Module& m) {
  return make_opt(kind, m.parameters());
}

inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  const Tensor d = abs(sub(a, b));
  const double scale = std::max(1e-30, max(abs(b)).item());
  return max(d).item() / scale;
}

// Worst relative difference between the parameters of two modules.
inline double params_diff(nn::Module& a, nn::Module& b) {
  const auto pa = a.parameters(), pb = b.parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, max_rel_diff(pa[i], pb[i]));
  return worst;
}

// How far N ranks may end from the one-process reference after a few steps, in float64 (relative
// to each parameter's largest value). The only difference is the order in which the shards'
// gradients are summed: 1e-16 of the contributions per element. SGD passes that on linearly
// (1e-12 holds). Adam divides each element by its own magnitude, so where the shards'
// contributions nearly cancel, the rounding becomes a relative error of the element and moves the
// update: on the MLP up to a few 1e-12 (3.6e-12 seen once in CI, 3 ranks); on the CNN, whose
// convolution biases feed BatchNorm and have a true gradient of 0 (pure rounding noise, which
// Adam normalises to steps of size lr), up to ~lr * 1e-7.
inline double equivalence_tolerance(const std::string& model, const std::string& optimizer) {
  if (optimizer != "adam") return 1e-12;
  return model == "cnn" ? 1e-7 : 1e-10;
}

// The one-process reference step: the mean of the shards' losses of `batch`, the gradient clipped
// to a global 2-norm of max_grad_norm when > 0, one optimizer step.
inline void reference_step(nn::Module& ref, optim::Optimizer& opt, const Batch& batch, int size,
                           double max_grad_norm = 0) {
  opt.zero_grad();
  Tensor loss;
  for (int r = 0; r < size; ++r) {
    const Batch part = shard(batch, r, size);
    Tensor l = cross_entropy(ref(part.x), part.y);
    loss = loss.defined() ? add(loss, l) : l;
  }
  mul(loss, 1.0 / size).backward();
  if (max_grad_norm > 0) optim::clip_grad_norm(ref.trainable_parameters(), max_grad_norm);
  opt.step();
}

}  // namespace gradus::testing
