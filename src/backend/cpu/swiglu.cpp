// The SwiGLU's backward in one pass over the elements (the forward is BinaryOp::swiglu), and the
// float32 loops of both (swiglu.h). The AVX-512 copy: on the Llama CPU benchmark's [4, 256, 704]
// the build's AVX2 loops are bound by exp and the division (about 0.4 ms a call at 2 threads).
#include "backend/cpu/swiglu.h"

#include <type_traits>

#include "backend/cpu/avx512_dispatch.h"
#include "backend/cpu/avx512_math.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/float_args.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/vec_math.h"

namespace gradus::backend::cpu {
namespace swiglu {
namespace {

// The build-ISA loops (the backward's also float64's, through the template; float64's forward is
// elementwise.cpp's generic map).
void forward_loop(const float* a, const float* b, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * vec::sigmoid(a[i]) * b[i];
}
template <typename T>
void backward_loop(const T* g, const T* x, const T* u, T* dx, T* du, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T s = vec::sigmoid(x[i]);
    du[i] = g[i] * x[i] * s;
    dx[i] = g[i] * u[i] * s * (T(1) + x[i] * (T(1) - s));
  }
}

#if GRADUS_AVX512_KERNELS
GRADUS_AVX512_BEGIN
using avx512::first_lanes;
using avx512::sigmoid16;

void forward_avx512(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 in = first_lanes(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(in, a + i);
    const __m512 u = _mm512_maskz_loadu_ps(in, b + i);
    _mm512_mask_storeu_ps(y + i, in, _mm512_mul_ps(_mm512_mul_ps(x, sigmoid16(x)), u));
  }
}

void backward_avx512(const float* g, const float* x, const float* u, float* dx, float* du,
                     int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0F);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 in = first_lanes(n - i);
    const __m512 gv = _mm512_maskz_loadu_ps(in, g + i);
    const __m512 xv = _mm512_maskz_loadu_ps(in, x + i);
    const __m512 uv = _mm512_maskz_loadu_ps(in, u + i);
    const __m512 s = sigmoid16(xv);
    _mm512_mask_storeu_ps(du + i, in, _mm512_mul_ps(_mm512_mul_ps(gv, xv), s));
    const __m512 lift = _mm512_add_ps(one, _mm512_mul_ps(xv, _mm512_sub_ps(one, s)));
    _mm512_mask_storeu_ps(dx + i, in, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(gv, uv), s), lift));
  }
}

GRADUS_AVX512_END

// Decided once (asked for every block of elements).
bool use_avx512() {
  static const bool on = cpu_has_avx512() && !isa_forced_base("GRADUS_SWIGLU_ISA");
  return on;
}
#endif

}  // namespace

void forward(const float* gate, const float* up, float* y, int64_t n) {
#if GRADUS_AVX512_KERNELS
  if (use_avx512()) return forward_avx512(gate, up, y, n);
#endif
  forward_loop(gate, up, y, n);
}

void backward(const float* g, const float* gate, const float* up, float* grad_gate, float* grad_up,
              int64_t n) {
#if GRADUS_AVX512_KERNELS
  if (use_avx512()) return backward_avx512(g, gate, up, grad_gate, grad_up, n);
#endif
  backward_loop(g, gate, up, grad_gate, grad_up, n);
}

}  // namespace swiglu

void CpuBackend::swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                                 const Tensor& grad_gate, const Tensor& grad_up) {
  const int64_t n = grad.numel();
  if (n == 0) return;
  F32Args f{*this, {}};
  const Tensor gf = f.in(grad), xf = f.in(gate), uf = f.in(up), dxf = f.out(grad_gate),
               duf = f.out(grad_up);
  dispatch_f(gf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *g = gf.data_ptr<T>(), *x = xf.data_ptr<T>(), *u = uf.data_ptr<T>();
    T *dx = dxf.data_ptr<T>(), *du = duf.data_ptr<T>();
    parallel_for(n, kGrain, [&](int64_t i0, int64_t i1) {
      if constexpr (std::is_same_v<T, float>) {
        swiglu::backward(g + i0, x + i0, u + i0, dx + i0, du + i0, i1 - i0);
      } else {
        swiglu::backward_loop(g + i0, x + i0, u + i0, dx + i0, du + i0, i1 - i0);
      }
    });
  });
  f.finish();
}

}  // namespace gradus::backend::cpu
