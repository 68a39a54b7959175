// The SwiGLU's backward, the device twin of src/backend/cpu/swiglu.cpp: one thread per element,
// math in float (double for f64).
#include "backend/cuda/ops.cuh"

namespace gradus::backend::cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(const T* grad, const T* gate, const T* up, T* grad_gate, T* grad_up,
                           int64_t n) {
  using C = compute_t<T>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const C g = load(grad + i), x = load(gate + i), u = load(up + i);
  const C s = m_sigmoid(x);
  grad_up[i] = convert<T>(g * x * s);
  grad_gate[i] = convert<T>(g * u * s * (C(1) + x * (C(1) - s)));
}

}  // namespace

void launch_swiglu_backward(const void* grad, const void* gate, const void* up, void* grad_gate,
                            void* grad_up, int64_t n, DType dtype, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float(dtype, "swiglu_backward", [&](auto tag) {
    using T = decltype(tag);
    swiglu_backward_kernel<T><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(grad), static_cast<const T*>(gate), static_cast<const T*>(up),
        static_cast<T*>(grad_gate), static_cast<T*>(grad_up), n);
  });
  GRADUS_CUDA_CHECK_LAUNCH("swiglu_backward");
}

}  // namespace gradus::backend::cuda
