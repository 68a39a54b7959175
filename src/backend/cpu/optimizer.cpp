// Fused multi-tensor SGD and Adam/AdamW steps: one pass over each parameter, all tensors cut into
// fixed chunks that threads share (so many small tensors parallelise as well as one big one).
//
// The arithmetic follows torch.optim.SGD / Adam / AdamW with foreach=False operation by
// operation (same order of float roundings, scalars computed in double and cast once):
//   SGD:  g = maximize ? -g : g;  g = g + wd * p;
//         buf = first_step ? g : buf * momentum + (1 - dampening) * g;
//         g = nesterov ? g + momentum * buf : buf;  p = p + (-lr) * g
//   Adam: g = maximize ? -g : g;  Adam: g = g + wd * p;  AdamW: p = p * (1 - lr * wd);
//         m = lerp(m, g, 1 - beta1);  v = v * beta2 + ((1 - beta2) * g) * g;
//         [amsgrad: vmax = max(vmax, v), used below instead of v]
//         denom = sqrt(v) / sqrt(1 - beta2^step) + eps;  p = p + ((-lr / (1 - beta1^step)) * m) /
//         denom
#include <atomic>
#include <cmath>

#include "backend/common/optim_math.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/loops.h"

namespace gradus::backend::cpu {
namespace {

constexpr int64_t kOptChunk = 16384;

struct Chunk {
  size_t tensor;
  int64_t begin, end;
};

std::vector<Chunk> make_chunks(const std::vector<Tensor>& params, int64_t& total) {
  std::vector<Chunk> chunks;
  total = 0;
  for (size_t t = 0; t < params.size(); ++t) {
    const int64_t n = params[t].numel();
    total += n;
    for (int64_t b = 0; b < n; b += kOptChunk) chunks.push_back({t, b, std::min(n, b + kOptChunk)});
  }
  return chunks;
}

template <typename F>
void run_chunks(const std::vector<Chunk>& chunks, int64_t total, const F& fn) {
  const int64_t n = static_cast<int64_t>(chunks.size());
  const int64_t grain = std::max<int64_t>(1, n * kGrain / std::max<int64_t>(total, 1));
  parallel_for(n, grain, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) fn(chunks[static_cast<size_t>(c)]);
  });
}

void check_params(const char* op, const std::vector<Tensor>& params) {
  for (const Tensor& p : params) {
    GRADUS_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, DTypeError, op,
                 ": parameters must be float32 or float64 on the CPU, got ", dtype_name(p.dtype()));
  }
}

template <typename T>
void sgd_chunk(T* p, const T* g, T* buf, int64_t n, const SgdArgs& a) {
  const T lr = static_cast<T>(-a.lr), wd = static_cast<T>(a.weight_decay);
  const T mom = static_cast<T>(a.momentum), damp = static_cast<T>(1.0 - a.dampening);
  const bool decay = a.weight_decay != 0.0, first = a.first_step, nesterov = a.nesterov;
  const T sign = a.maximize ? T(-1) : T(1);
  if (buf == nullptr) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      T gi = sign * g[i];
      if (decay) gi = gi + wd * p[i];
      p[i] = p[i] + lr * gi;
    }
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    T gi = sign * g[i];
    if (decay) gi = gi + wd * p[i];
    const T b = first ? gi : buf[i] * mom + damp * gi;
    buf[i] = b;
    gi = nesterov ? gi + mom * b : b;
    p[i] = p[i] + lr * gi;
  }
}

enum class WeightDecay { none, l2, decoupled };

// The options that change the loop body are template parameters, not tests inside the loop: with
// a null-checked pointer, or with both weight-decay branches in one loop, GCC 12 does not
// vectorise it and the whole step runs on scalar sqrt/div (a fifth of an MLP training step).
template <typename T, bool kAmsgrad, WeightDecay kDecay>
void adam_chunk(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                T* __restrict vmax, int64_t n, const AdamArgs& a) {
  const AdamCoefficients k =
      adam_coefficients(a.lr, static_cast<double>(a.step), a.beta1, a.beta2, a.weight_decay);
  const T neg_step_size = static_cast<T>(k.neg_step_size);
  const T bc2 = static_cast<T>(k.bias2_sqrt), eps = static_cast<T>(a.eps);
  const T w1 = static_cast<T>(1.0 - a.beta1), b2 = static_cast<T>(a.beta2);
  const T one_minus_b2 = static_cast<T>(1.0 - a.beta2);
  const T wd = static_cast<T>(a.weight_decay);
  const T decoupled_scale = static_cast<T>(k.decoupled_scale);
  const bool small_w = std::fabs(1.0 - a.beta1) < 0.5;  // torch.lerp's two formulas
  const T sign = a.maximize ? T(-1) : T(1);
  for (int64_t i = 0; i < n; ++i) {
    T gi = sign * g[i];
    T pi = p[i];
    if constexpr (kDecay == WeightDecay::l2) gi = gi + wd * pi;
    if constexpr (kDecay == WeightDecay::decoupled) pi = pi * decoupled_scale;
    const T mo = m[i], vo = v[i];
    const T mi = small_w ? mo + w1 * (gi - mo) : gi - (gi - mo) * (T(1) - w1);
    const T vi = vo * b2 + one_minus_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    T vd = vi;
    if constexpr (kAmsgrad) {
      vd = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = vd;
    }
    const T denom = std::sqrt(vd) / bc2 + eps;
    p[i] = pi + neg_step_size * mi / denom;
  }
}

template <typename T, bool kAmsgrad>
void adam_chunk_for(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamArgs& a) {
  if (a.weight_decay == 0.0) {
    adam_chunk<T, kAmsgrad, WeightDecay::none>(p, g, m, v, vmax, n, a);
  } else if (a.decoupled_weight_decay) {
    adam_chunk<T, kAmsgrad, WeightDecay::decoupled>(p, g, m, v, vmax, n, a);
  } else {
    adam_chunk<T, kAmsgrad, WeightDecay::l2>(p, g, m, v, vmax, n, a);
  }
}

}  // namespace

void CpuBackend::sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& momentum_buffers, const SgdArgs& sgd_args) {
  check_params("sgd_step", params);
  SgdArgs args = sgd_args;
  if (args.device_scalars != nullptr) args.lr = args.device_scalars[0];  // capturable
  int64_t total;
  const std::vector<Chunk> chunks = make_chunks(params, total);
  const bool use_buf = args.momentum != 0.0;
  run_chunks(chunks, total, [&](const Chunk& c) {
    const Tensor& p = params[c.tensor];
    const Tensor* buf =
        use_buf && c.tensor < momentum_buffers.size() && momentum_buffers[c.tensor].defined()
            ? &momentum_buffers[c.tensor]
            : nullptr;
    const int64_t n = c.end - c.begin;
    if (p.dtype() == DType::f64) {
      sgd_chunk<double>(static_cast<double*>(p.raw_data()) + c.begin,
                        static_cast<const double*>(grads[c.tensor].raw_data()) + c.begin,
                        buf ? static_cast<double*>(buf->raw_data()) + c.begin : nullptr, n, args);
    } else {
      sgd_chunk<float>(static_cast<float*>(p.raw_data()) + c.begin,
                       static_cast<const float*>(grads[c.tensor].raw_data()) + c.begin,
                       buf ? static_cast<float*>(buf->raw_data()) + c.begin : nullptr, n, args);
    }
  });
}

void CpuBackend::adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& exp_avg,
                           const std::vector<Tensor>& exp_avg_sq,
                           const std::vector<Tensor>& max_exp_avg_sq, const AdamArgs& adam_args) {
  check_params("adam_step", params);
  AdamArgs args = adam_args;
  if (args.device_scalars != nullptr) {  // capturable: {lr, step} in memory
    args.lr = args.device_scalars[0];
    args.step = static_cast<int64_t>(args.device_scalars[1]);
  }
  int64_t total;
  const std::vector<Chunk> chunks = make_chunks(params, total);
  const bool ams = args.amsgrad && !max_exp_avg_sq.empty();
  run_chunks(chunks, total, [&](const Chunk& c) {
    const size_t t = c.tensor;
    const int64_t n = c.end - c.begin;
    auto ptr = [&](const Tensor& x, auto tag) {
      return static_cast<decltype(tag)*>(x.raw_data()) + c.begin;
    };
    auto run = [&](auto zero) {
      using T = decltype(zero);
      if (ams) {
        adam_chunk_for<T, true>(ptr(params[t], zero), ptr(grads[t], zero), ptr(exp_avg[t], zero),
                                ptr(exp_avg_sq[t], zero), ptr(max_exp_avg_sq[t], zero), n, args);
      } else {
        adam_chunk_for<T, false>(ptr(params[t], zero), ptr(grads[t], zero), ptr(exp_avg[t], zero),
                                 ptr(exp_avg_sq[t], zero), nullptr, n, args);
      }
    };
    if (params[t].dtype() == DType::f64) {
      run(0.0);
    } else {
      run(0.0f);
    }
  });
}

namespace {

// x *= scale over [begin, end); true when an element was not finite (before scaling). 16-bit
// values compute in float, like every other 16-bit op on the CPU.
template <typename T, typename C>
bool unscale_chunk(T* x, int64_t begin, int64_t end, C scale) {
  bool bad = false;
  for (int64_t i = begin; i < end; ++i) {
    const C v = static_cast<C>(x[i]);
    bad |= !std::isfinite(v);
    x[i] = static_cast<T>(v * scale);
  }
  return bad;
}

}  // namespace

void CpuBackend::unscale_and_check(const std::vector<Tensor>& tensors, double scale,
                                   const Tensor& found_inf) {
  GRADUS_CHECK(found_inf.dtype() == DType::f32 && found_inf.numel() == 1, DTypeError,
               "unscale_and_check: found_inf must be one float32 element");
  for (const Tensor& t : tensors) {
    GRADUS_CHECK(t.is_contiguous() && is_floating(t.dtype()), ValueError,
                 "unscale_and_check: tensors must be contiguous and floating, got ",
                 dtype_name(t.dtype()), " ", shape_str(t.sizes()));
  }
  int64_t total;
  const std::vector<Chunk> chunks = make_chunks(tensors, total);
  std::atomic<bool> found{false};
  const float fscale = static_cast<float>(scale);
  run_chunks(chunks, total, [&](const Chunk& c) {
    const Tensor& t = tensors[c.tensor];
    bool bad = false;
    switch (t.dtype()) {
      case DType::f64:
        bad = unscale_chunk(static_cast<double*>(t.raw_data()), c.begin, c.end, scale);
        break;
      case DType::f32:
        bad = unscale_chunk(static_cast<float*>(t.raw_data()), c.begin, c.end, fscale);
        break;
      case DType::f16:
        bad = unscale_chunk(static_cast<Half*>(t.raw_data()), c.begin, c.end, fscale);
        break;
      default:
        bad = unscale_chunk(static_cast<BFloat16*>(t.raw_data()), c.begin, c.end, fscale);
        break;
    }
    if (bad) found.store(true, std::memory_order_relaxed);
  });
  if (found.load()) *static_cast<float*>(found_inf.raw_data()) = 1.0f;
}

}  // namespace gradus::backend::cpu
