// The SwiGLU's backward in one pass over the elements (the forward is BinaryOp::swiglu).
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/float_args.h"
#include "backend/cpu/loops.h"
#include "backend/cpu/vec_math.h"

namespace gradus::backend::cpu {

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
#pragma omp simd
      for (int64_t i = i0; i < i1; ++i) {
        const T s = vec::sigmoid(x[i]);
        du[i] = g[i] * x[i] * s;
        dx[i] = g[i] * u[i] * s * (T(1) + x[i] * (T(1) - s));
      }
    });
  });
  f.finish();
}

}  // namespace gradus::backend::cpu
