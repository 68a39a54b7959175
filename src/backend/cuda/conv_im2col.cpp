// Convolution as im2col + GEMM. Images are processed in chunks whose column buffer stays under
// kColumnBytes; within a chunk each channel group is one batched GEMM (the weights broadcast
// over the images with batch stride 0):
//   forward:         out[n, g]  [Og, P]  = W_g [Og, K] @ col[n] [K, P]
//   backward data:   col[n]     [K, P]   = W_g^T [K, Og] @ gy[n, g] [Og, P], then col2im
//   backward weight: gW_g       [Og, K] += gy[n, g] [Og, P] @ col[n]^T [P, K] (per image, beta 1)
// with K = C/groups * KH * KW and P = OH * OW.
#include "backend/cuda/conv_im2col.h"

#include <algorithm>

#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"

namespace gradus::backend::cuda::im2col {
namespace {

constexpr int64_t kColumnBytes = int64_t{256} << 20;

struct Dims {
  ConvGeom g;
  int64_t n, o, og, k, p, chunk;
};

Dims dims_of(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dArgs& a) {
  Dims d;
  d.n = x.size(0);
  d.g.c = x.size(1);
  d.g.h = x.size(2);
  d.g.w = x.size(3);
  d.g.cg = d.g.c / a.groups;
  d.g.kh = w.size(2);
  d.g.kw = w.size(3);
  d.g.oh = y.size(2);
  d.g.ow = y.size(3);
  d.g.sh = a.stride_h;
  d.g.sw = a.stride_w;
  d.g.ph = a.pad_h;
  d.g.pw = a.pad_w;
  d.g.dh = a.dilation_h;
  d.g.dw = a.dilation_w;
  d.o = w.size(0);
  d.og = d.o / a.groups;
  d.k = d.g.cg * d.g.kh * d.g.kw;
  d.p = d.g.oh * d.g.ow;
  const int64_t per_image =
      std::max<int64_t>(1, d.k * d.p * static_cast<int64_t>(x.element_size()));
  d.chunk = std::clamp<int64_t>(kColumnBytes / per_image, 1, std::max<int64_t>(d.n, 1));
  return d;
}

cudaStream_t stream_for(const Tensor& t) {
  return stream_of(t.device().index());
}

}  // namespace

void forward(CudaBackend& be, const Tensor& x, const Tensor& w, const Tensor& out,
             const Conv2dArgs& args) {
  const Dims d = dims_of(x, w, out, args);
  Tensor col = empty({d.chunk, d.k, d.p}, {x.dtype(), x.device()});
  for (int64_t n0 = 0; n0 < d.n; n0 += d.chunk) {
    const int64_t nb = std::min(d.chunk, d.n - n0);
    const Tensor x_n =
        x.as_strided_raw({nb, d.g.c, d.g.h, d.g.w}, x.strides(), x.offset() + n0 * x.stride(0));
    for (int64_t g = 0; g < args.groups; ++g) {
      launch_im2col(x_n.raw_data(), col.raw_data(), x.dtype(), nb, g, d.g, stream_for(x));
      const Tensor wg = w.as_strided_raw({nb, d.og, d.k}, {0, d.k, 1}, w.offset() + g * d.og * d.k);
      const Tensor cb = col.as_strided_raw({nb, d.k, d.p}, {d.k * d.p, d.p, 1}, col.offset());
      const Tensor ob = out.as_strided_raw({nb, d.og, d.p}, {d.o * d.p, d.p, 1},
                                           out.offset() + (n0 * d.o + g * d.og) * d.p);
      be.gemm(wg, cb, ob, GemmArgs{});
    }
  }
}

void backward_data(CudaBackend& be, const Tensor& grad_out, const Tensor& w, const Tensor& grad_x,
                   const Conv2dArgs& args) {
  const Dims d = dims_of(grad_x, w, grad_out, args);
  Tensor col = empty({d.chunk, d.k, d.p}, {grad_x.dtype(), grad_x.device()});
  for (int64_t n0 = 0; n0 < d.n; n0 += d.chunk) {
    const int64_t nb = std::min(d.chunk, d.n - n0);
    for (int64_t g = 0; g < args.groups; ++g) {
      // W_g stored [Og, K]: used transposed.
      const Tensor wg = w.as_strided_raw({nb, d.og, d.k}, {0, d.k, 1}, w.offset() + g * d.og * d.k);
      const Tensor gyb = grad_out.as_strided_raw({nb, d.og, d.p}, {d.o * d.p, d.p, 1},
                                                 grad_out.offset() + (n0 * d.o + g * d.og) * d.p);
      const Tensor cb = col.as_strided_raw({nb, d.k, d.p}, {d.k * d.p, d.p, 1}, col.offset());
      GemmArgs a;
      a.trans_a = true;
      be.gemm(wg, gyb, cb, a);
      char* gx = static_cast<char*>(grad_x.raw_data()) +
                 n0 * grad_x.stride(0) * static_cast<int64_t>(grad_x.element_size());
      launch_col2im(col.raw_data(), gx, grad_x.dtype(), nb, g, d.g, stream_for(grad_x));
    }
  }
}

void backward_weight(CudaBackend& be, const Tensor& grad_out, const Tensor& x, const Tensor& grad_w,
                     const Conv2dArgs& args) {
  const Dims d = dims_of(x, grad_w, grad_out, args);
  Tensor col = empty({d.chunk, d.k, d.p}, {x.dtype(), x.device()});
  for (int64_t n0 = 0; n0 < d.n; n0 += d.chunk) {
    const int64_t nb = std::min(d.chunk, d.n - n0);
    const Tensor x_n =
        x.as_strided_raw({nb, d.g.c, d.g.h, d.g.w}, x.strides(), x.offset() + n0 * x.stride(0));
    for (int64_t g = 0; g < args.groups; ++g) {
      launch_im2col(x_n.raw_data(), col.raw_data(), x.dtype(), nb, g, d.g, stream_for(x));
      const Tensor gw =
          grad_w.as_strided_raw({1, d.og, d.k}, {0, d.k, 1}, grad_w.offset() + g * d.og * d.k);
      for (int64_t i = 0; i < nb; ++i) {
        const Tensor gyi = grad_out.as_strided_raw(
            {1, d.og, d.p}, {0, d.p, 1}, grad_out.offset() + ((n0 + i) * d.o + g * d.og) * d.p);
        // col[i] stored [K, P]: used transposed.
        const Tensor ci =
            col.as_strided_raw({1, d.k, d.p}, {0, d.p, 1}, col.offset() + i * d.k * d.p);
        GemmArgs a;
        a.trans_b = true;
        a.beta = n0 + i == 0 ? 0.0 : 1.0;
        be.gemm(gyi, ci, gw, a);
      }
    }
  }
}

}  // namespace gradus::backend::cuda::im2col
