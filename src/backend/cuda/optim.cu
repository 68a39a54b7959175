// Fused multi-tensor SGD and Adam / AdamW: one launch per list of up to kMaxTensorsPerLaunch
// tensors (pointers passed by value), each block taking a chunk of one tensor. The arithmetic is
// the CPU backend's (src/backend/cpu/optimizer.cpp) operation by operation, with products and
// sums rounded separately (no FMA contraction), so float32 / float64 steps match it bit for bit.
// 16-bit parameters compute in float. Gradients and states may have their own dtypes.
#include "backend/common/optim_math.h"
#include "backend/cuda/common.cuh"

namespace gradus::backend::cuda {
namespace {

__device__ __forceinline__ float mul(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ __forceinline__ double mul(double a, double b) {
  return __dmul_rn(a, b);
}
__device__ __forceinline__ float add(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ double add(double a, double b) {
  return __dadd_rn(a, b);
}
__device__ __forceinline__ float sub(float a, float b) {
  return __fsub_rn(a, b);
}
__device__ __forceinline__ double sub(double a, double b) {
  return __dsub_rn(a, b);
}
__device__ __forceinline__ float div(float a, float b) {
  return __fdiv_rn(a, b);
}
__device__ __forceinline__ double div(double a, double b) {
  return __ddiv_rn(a, b);
}
__device__ __forceinline__ float sqrt_rn(float a) {
  return __fsqrt_rn(a);
}
__device__ __forceinline__ double sqrt_rn(double a) {
  return __dsqrt_rn(a);
}

// The tensor and element range of this block.
__device__ __forceinline__ bool locate(const TensorList& l, int& t, int64_t& begin, int64_t& end) {
  const int b = static_cast<int>(blockIdx.x);
  t = 0;
  while (t < l.count && l.chunk_start[t + 1] <= b) ++t;
  if (t >= l.count) return false;
  begin = static_cast<int64_t>(b - l.chunk_start[t]) * kOptimChunk;
  end = min(l.numel[t], begin + kOptimChunk);
  return begin < end;
}

template <typename C>
__device__ __forceinline__ C ld(const void* base, DType t, int64_t i) {
  return load_dyn<C>(static_cast<const char*>(base) + i * dtype_bytes(t), t);
}
template <typename C>
__device__ __forceinline__ void st(void* base, DType t, int64_t i, C v) {
  store_dyn(static_cast<char*>(base) + i * dtype_bytes(t), t, v);
}

template <typename C>
struct SgdScalars {
  C lr, wd, mom, damp, sign;
  bool decay, first, nesterov;
  const double* device_scalars;  // capturable: {lr, step} in device memory, else nullptr
};

template <typename P>
__global__ void __launch_bounds__(kThreads) sgd_kernel(TensorList l, SgdScalars<compute_t<P>> a) {
  using C = compute_t<P>;
  int t;
  int64_t begin, end;
  if (!locate(l, t, begin, end)) return;
  if (a.device_scalars != nullptr) a.lr = static_cast<C>(-a.device_scalars[0]);
  P* p = static_cast<P*>(l.param[t]);
  const void* g = l.grad[t];
  void* buf = l.state1[t];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const C pi = load(p + i);
    C gi = mul(a.sign, ld<C>(g, l.grad_dtype, i));
    if (a.decay) gi = add(gi, mul(a.wd, pi));
    if (buf != nullptr) {
      const C b = a.first ? gi : add(mul(ld<C>(buf, l.state_dtype, i), a.mom), mul(a.damp, gi));
      st(buf, l.state_dtype, i, b);
      gi = a.nesterov ? add(gi, mul(a.mom, b)) : b;
    }
    p[i] = convert<P>(add(pi, mul(a.lr, gi)));
  }
}

template <typename C>
struct AdamScalars {
  C neg_step_size, bc2, eps, w1, b2, one_minus_b2, wd, decoupled_scale, sign;
  bool l2, decoupled, small_w, amsgrad;
  // Capturable: {lr, step} in device memory, from which the first three are computed here (the
  // host's formula, backend/common/optim_math.h); nullptr otherwise.
  const double* device_scalars;
  double beta1, beta2, weight_decay;
};

template <typename P>
__global__ void __launch_bounds__(kThreads) adam_kernel(TensorList l, AdamScalars<compute_t<P>> a) {
  using C = compute_t<P>;
  int t;
  int64_t begin, end;
  if (!locate(l, t, begin, end)) return;
  if (a.device_scalars != nullptr) {
    const AdamCoefficients k = adam_coefficients(a.device_scalars[0], a.device_scalars[1], a.beta1,
                                                 a.beta2, a.weight_decay);
    a.neg_step_size = static_cast<C>(k.neg_step_size);
    a.bc2 = static_cast<C>(k.bias2_sqrt);
    a.decoupled_scale = static_cast<C>(k.decoupled_scale);
  }
  P* p = static_cast<P*>(l.param[t]);
  const void* g = l.grad[t];
  void* m = l.state1[t];
  void* v = l.state2[t];
  void* vmax = a.amsgrad ? l.state3[t] : nullptr;
  const DType sd = l.state_dtype;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    C gi = mul(a.sign, ld<C>(g, l.grad_dtype, i));
    C pi = load(p + i);
    if (a.l2) gi = add(gi, mul(a.wd, pi));
    if (a.decoupled) pi = mul(pi, a.decoupled_scale);
    const C m0 = ld<C>(m, sd, i);
    const C mi =
        a.small_w ? add(m0, mul(a.w1, sub(gi, m0))) : sub(gi, mul(sub(gi, m0), sub(C(1), a.w1)));
    const C vi = add(mul(ld<C>(v, sd, i), a.b2), mul(mul(a.one_minus_b2, gi), gi));
    st(m, sd, i, mi);
    st(v, sd, i, vi);
    C vd = vi;
    if (vmax != nullptr) {
      const C old = ld<C>(vmax, sd, i);
      vd = old > vi ? old : vi;
      st(vmax, sd, i, vd);
    }
    const C denom = add(div(sqrt_rn(vd), a.bc2), a.eps);
    p[i] = convert<P>(add(pi, div(mul(a.neg_step_size, mi), denom)));
  }
}

template <typename Fn>
void dispatch_param(DType t, Fn&& fn) {
  dispatch_float(t, "optimizer step", fn);
}

}  // namespace

void launch_sgd(const TensorList& l, const SgdArgs& args, cudaStream_t stream) {
  const int blocks = l.chunk_start[l.count];
  if (blocks == 0) return;
  dispatch_param(l.param_dtype, [&](auto tag) {
    using P = decltype(tag);
    using C = compute_t<P>;
    SgdScalars<C> a{};
    a.lr = static_cast<C>(-args.lr);
    a.wd = static_cast<C>(args.weight_decay);
    a.mom = static_cast<C>(args.momentum);
    a.damp = static_cast<C>(1.0 - args.dampening);
    a.sign = args.maximize ? C(-1) : C(1);
    a.decay = args.weight_decay != 0.0;
    a.first = args.first_step;
    a.nesterov = args.nesterov;
    a.device_scalars = args.device_scalars;
    sgd_kernel<P><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(l, a);
  });
  GRADUS_CUDA_CHECK_LAUNCH("sgd_step");
}

void launch_adam(const TensorList& l, const AdamArgs& args, cudaStream_t stream) {
  const int blocks = l.chunk_start[l.count];
  if (blocks == 0) return;
  const AdamCoefficients k = adam_coefficients(args.lr, static_cast<double>(args.step), args.beta1,
                                               args.beta2, args.weight_decay);
  dispatch_param(l.param_dtype, [&](auto tag) {
    using P = decltype(tag);
    using C = compute_t<P>;
    AdamScalars<C> a{};
    a.neg_step_size = static_cast<C>(k.neg_step_size);
    a.bc2 = static_cast<C>(k.bias2_sqrt);
    a.eps = static_cast<C>(args.eps);
    a.w1 = static_cast<C>(1.0 - args.beta1);
    a.b2 = static_cast<C>(args.beta2);
    a.one_minus_b2 = static_cast<C>(1.0 - args.beta2);
    a.wd = static_cast<C>(args.weight_decay);
    a.decoupled_scale = static_cast<C>(k.decoupled_scale);
    a.sign = args.maximize ? C(-1) : C(1);
    a.l2 = args.weight_decay != 0.0 && !args.decoupled_weight_decay;
    a.decoupled = args.weight_decay != 0.0 && args.decoupled_weight_decay;
    a.small_w = std::fabs(1.0 - args.beta1) < 0.5;
    a.amsgrad = args.amsgrad;
    a.device_scalars = args.device_scalars;
    a.beta1 = args.beta1;
    a.beta2 = args.beta2;
    a.weight_decay = args.weight_decay;
    adam_kernel<P><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(l, a);
  });
  GRADUS_CUDA_CHECK_LAUNCH("adam_step");
}

namespace {

// Loss-scaling's unscale: x *= scale, and a flag where any element was not finite (before
// scaling). Every thread that sees one writes the same 1, so the race is benign.
template <typename P>
__global__ void __launch_bounds__(kThreads)
    unscale_kernel(TensorList l, compute_t<P> scale, float* found_inf) {
  using C = compute_t<P>;
  int t;
  int64_t begin, end;
  if (!locate(l, t, begin, end)) return;
  P* x = static_cast<P*>(l.param[t]);
  bool bad = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const C v = load(x + i);
    bad |= !isfinite(v);
    x[i] = convert<P>(mul(v, scale));
  }
  if (bad) *found_inf = 1.0f;
}

}  // namespace

void launch_unscale(const TensorList& l, double scale, float* found_inf, cudaStream_t stream) {
  const int blocks = l.chunk_start[l.count];
  if (blocks == 0) return;
  dispatch_float(l.param_dtype, "unscale_and_check", [&](auto tag) {
    using P = decltype(tag);
    unscale_kernel<P><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        l, static_cast<compute_t<P>>(scale), found_inf);
  });
  GRADUS_CUDA_CHECK_LAUNCH("unscale_and_check");
}

}  // namespace gradus::backend::cuda
