// 2-D convolution and pooling: conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d.
//
// Inputs are [N, C, H, W] or unbatched [C, H, W] (viewed as N = 1). Every parameter is validated
// here with PyTorch's rules and output-size formulas, so the kernels (which need contiguous
// NCHW tensors) only ever see well-formed problems.
#include <algorithm>

#include "gradus/core/kernel_counts.h"
#include "ops/autocast.h"
#include "ops/common.h"

namespace gradus {
namespace ops {
namespace {

using backend::Conv2dArgs;
using backend::Pool2dArgs;

struct Pair {
  int64_t h, w;
};

// A (height, width) parameter given as one value (both) or two.
Pair pair_arg(const char* op, const char* what, const std::vector<int64_t>& v) {
  GRADUS_CHECK(v.size() == 1 || v.size() == 2, ValueError, op, ": ", what,
               " must have 1 or 2 values (height, width), got ", v.size());
  return {v[0], v.size() == 2 ? v[1] : v[0]};
}

void check_positive(const char* op, const char* what, Pair p) {
  GRADUS_CHECK(p.h > 0 && p.w > 0, ValueError, op, ": ", what, " must be positive, got (", p.h,
               ", ", p.w, ")");
}

// x as a contiguous [N, C, H, W] tensor (unbatched [C, H, W] gets N = 1).
Tensor as_nchw(const char* op, const Tensor& x) {
  GRADUS_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError, op,
               ": expected input [N, C, H, W] or [C, H, W], got ", shape_str(x.sizes()));
  const Tensor c = contiguous_raw(x);
  if (x.dim() == 4) return c;
  Shape s = c.sizes();
  s.insert(s.begin(), 1);
  return c.as_strided_raw(s, contiguous_strides(s), c.offset());
}

// A fresh contiguous NCHW result viewed unbatched when the input was.
Tensor unbatch(const Tensor& out, bool batched) {
  if (batched) return out;
  const Shape s(out.sizes().begin() + 1, out.sizes().end());
  return out.as_strided_raw(s, contiguous_strides(s), out.offset());
}

// The incoming gradient as a contiguous [N, C, H, W] tensor.
Tensor grad_nchw(const Tensor& g) {
  const Tensor c = contiguous_raw(g);
  if (c.dim() == 4) return c;
  Shape s = c.sizes();
  s.insert(s.begin(), 1);
  return c.as_strided_raw(s, contiguous_strides(s), c.offset());
}

// PyTorch's pooling_output_shape (floor division, and the ceil_mode rule that the last window
// must start inside the input or its left padding).
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                         bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

struct PoolSetup {
  Tensor x4;  // contiguous [N, C, H, W]
  bool batched;
  Pool2dArgs args;
  int64_t out_h, out_w;
};

PoolSetup pool_setup(const char* op, const Tensor& x, const Pool2dOptions& o, bool is_max) {
  check_defined(op, {&x});
  check_floating(op, x);
  PoolSetup s;
  s.batched = x.dim() == 4;
  s.x4 = as_nchw(op, x);
  const Pair k = pair_arg(op, "kernel_size", o.kernel_size);
  const Pair st = o.stride.empty() ? k : pair_arg(op, "stride", o.stride);
  const Pair pad = pair_arg(op, "padding", o.padding);
  const Pair dil = pair_arg(op, "dilation", o.dilation);
  check_positive(op, "kernel_size", k);
  check_positive(op, "stride", st);
  check_positive(op, "dilation", dil);
  GRADUS_CHECK(is_max || (dil.h == 1 && dil.w == 1), ValueError, op,
               ": dilation is only supported by max pooling");
  GRADUS_CHECK(pad.h >= 0 && pad.w >= 0, ValueError, op, ": padding must be non-negative, got (",
               pad.h, ", ", pad.w, ")");
  GRADUS_CHECK(pad.h <= k.h / 2 && pad.w <= k.w / 2, ValueError, op, ": padding (", pad.h, ", ",
               pad.w, ") must be at most half the kernel size (", k.h, ", ", k.w, ")");
  const int64_t h = s.x4.size(2), w = s.x4.size(3);
  s.out_h = pool_output_size(h, k.h, pad.h, st.h, dil.h, o.ceil_mode);
  s.out_w = pool_output_size(w, k.w, pad.w, st.w, dil.w, o.ceil_mode);
  GRADUS_CHECK(s.out_h >= 1 && s.out_w >= 1, ShapeError, op, ": input ", shape_str(x.sizes()),
               " is too small for kernel (", k.h, ", ", k.w, ") with padding (", pad.h, ", ", pad.w,
               ") and dilation (", dil.h, ", ", dil.w, "): the output would be ", s.out_h, "x",
               s.out_w);
  s.args.kernel_h = k.h;
  s.args.kernel_w = k.w;
  s.args.stride_h = st.h;
  s.args.stride_w = st.w;
  s.args.pad_h = pad.h;
  s.args.pad_w = pad.w;
  s.args.dilation_h = dil.h;
  s.args.dilation_w = dil.w;
  s.args.ceil_mode = o.ceil_mode;
  s.args.count_include_pad = o.count_include_pad;
  return s;
}

}  // namespace
}  // namespace ops

using namespace ops;

// ------------------------------------------------------------------------------------ conv2d
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  GRADUS_PROFILE_OP("conv2d");
  if (AutocastInputs cast{"conv2d", {&x, &weight, &bias}}) {
    return conv2d(cast[0], cast[1], cast[2], o);
  }
  const char* op = "conv2d";
  check_defined(op, {&x, &weight});
  check_same_device(op, {&x, &weight, &bias});
  check_floating(op, x);
  GRADUS_CHECK(weight.dtype() == x.dtype(), DTypeError, "conv2d: weight dtype ",
               dtype_name(weight.dtype()), " differs from the input's ", dtype_name(x.dtype()));
  GRADUS_CHECK(weight.dim() == 4, ShapeError,
               "conv2d: weight must be 4-D [out_channels, in_channels / groups, kH, kW], got ",
               shape_str(weight.sizes()));
  const bool batched = x.dim() == 4;
  const Tensor x4 = as_nchw(op, x);
  const Pair st = pair_arg(op, "stride", o.stride);
  const Pair pad = pair_arg(op, "padding", o.padding);
  const Pair dil = pair_arg(op, "dilation", o.dilation);
  check_positive(op, "stride", st);
  check_positive(op, "dilation", dil);
  GRADUS_CHECK(pad.h >= 0 && pad.w >= 0, ValueError, "conv2d: padding must be non-negative, got (",
               pad.h, ", ", pad.w, ")");
  GRADUS_CHECK(o.groups > 0, ValueError, "conv2d: groups must be positive, got ", o.groups);
  const int64_t n = x4.size(0), c = x4.size(1), h = x4.size(2), w = x4.size(3);
  const int64_t oc = weight.size(0), cg = weight.size(1), kh = weight.size(2), kw = weight.size(3);
  GRADUS_CHECK(c % o.groups == 0, ShapeError, "conv2d: input channels (", c,
               ") are not divisible by groups (", o.groups, ")");
  GRADUS_CHECK(oc % o.groups == 0, ShapeError, "conv2d: output channels (", oc,
               ") are not divisible by groups (", o.groups, ")");
  GRADUS_CHECK(cg * o.groups == c, ShapeError, "conv2d: weight ", shape_str(weight.sizes()),
               " expects ", cg * o.groups, " input channels (", cg,
               " per group x groups=", o.groups, "), but input ", shape_str(x.sizes()), " has ", c,
               " channels");
  GRADUS_CHECK(kh > 0 && kw > 0, ShapeError, "conv2d: kernel size must be positive, got weight ",
               shape_str(weight.sizes()));
  if (bias.defined()) {
    GRADUS_CHECK(bias.dim() == 1 && bias.size(0) == oc, ShapeError,
                 "conv2d: bias must have shape [", oc, "] (one per output channel), got ",
                 shape_str(bias.sizes()));
    GRADUS_CHECK(bias.dtype() == x.dtype(), DTypeError, "conv2d: bias dtype ",
                 dtype_name(bias.dtype()), " differs from the input's ", dtype_name(x.dtype()));
  }
  const int64_t ekh = dil.h * (kh - 1) + 1, ekw = dil.w * (kw - 1) + 1;
  GRADUS_CHECK(ekh <= h + 2 * pad.h && ekw <= w + 2 * pad.w, ShapeError, "conv2d: kernel ", kh, "x",
               kw, " (", ekh, "x", ekw, " with dilation) is larger than the padded input ",
               h + 2 * pad.h, "x", w + 2 * pad.w, " (input ", shape_str(x.sizes()), ", padding (",
               pad.h, ", ", pad.w, "))");
  const int64_t oh = (h + 2 * pad.h - ekh) / st.h + 1, ow = (w + 2 * pad.w - ekw) / st.w + 1;

  Conv2dArgs args;
  args.stride_h = st.h;
  args.stride_w = st.w;
  args.pad_h = pad.h;
  args.pad_w = pad.w;
  args.dilation_h = dil.h;
  args.dilation_w = dil.w;
  args.groups = o.groups;
  const Tensor wc = contiguous_raw(weight);
  const Tensor bc = bias.defined() ? contiguous_raw(bias) : Tensor();
  Tensor out = new_empty({n, oc, oh, ow}, x.dtype(), x.device());
  if (out.numel() > 0) {
    if (c == 0) {  // an empty sum over input channels
      if (bc.defined()) {
        backend_of(x).copy(
            broadcast_raw(bc.as_strided_raw({oc, 1, 1}, {1, 1, 1}, bc.offset()), out.sizes()), out);
      } else {
        backend_of(x).fill(out, 0.0);
      }
    } else {
      backend_of(x).conv2d(x4, wc, bc, out, args);
    }
  }
  return record(op, unbatch(out, batched), {x, weight, bias},
                [sx = SavedTensor(x4), sw = SavedTensor(wc), args, batched, x_shape = x.sizes(),
                 w_shape = weight.sizes()](const TensorList& g, const NeedsGrad& needs) {
                  const Tensor g4 = grad_nchw(g[0]);
                  const Tensor xv = sx.get(), wv = sw.get();
                  TensorList grads(3);
                  const bool empty = g4.numel() == 0 || xv.numel() == 0;
                  if (needs[0]) {
                    Tensor gx = empty ? zeros(xv.sizes(), g4.options())
                                      : new_empty(xv.sizes(), g4.dtype(), g4.device());
                    if (!empty) {
                      gradus::detail::count_kernel("conv2d.input_grad");
                      backend_of(gx).conv2d_backward_data(g4, wv, gx, args);
                    }
                    grads[0] = gx.as_strided_raw(x_shape, contiguous_strides(x_shape), 0);
                  }
                  if (needs[1] || needs[2]) {
                    Tensor gw = empty ? zeros(w_shape, g4.options())
                                      : new_empty(w_shape, g4.dtype(), g4.device());
                    Tensor gb =
                        needs[2] ? new_empty({w_shape[0]}, g4.dtype(), g4.device()) : Tensor();
                    if (!empty) {
                      gradus::detail::count_kernel("conv2d.weight_grad");
                      backend_of(gw).conv2d_backward_weight(g4, xv, gw, gb, args);
                    } else if (gb.defined()) {
                      gb = sum(g4, {0, 2, 3});
                    }
                    if (needs[1]) grads[1] = gw;
                    grads[2] = gb;
                  }
                  return grads;
                });
}

// ------------------------------------------------------------------------------------ pooling
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options) {
  GRADUS_PROFILE_OP("max_pool2d");
  const PoolSetup s = pool_setup("max_pool2d", x, options, /*is_max=*/true);
  const Shape out_shape{s.x4.size(0), s.x4.size(1), s.out_h, s.out_w};
  Tensor out = new_empty(out_shape, x.dtype(), x.device());
  Tensor indices = new_empty(out_shape, DType::i64, x.device());
  if (out.numel() > 0) backend_of(x).max_pool2d(s.x4, out, indices, s.args);
  return record("max_pool2d", unbatch(out, s.batched), {x},
                [si = SavedTensor(indices), x4_shape = s.x4.sizes(), x_shape = x.sizes()](
                    const TensorList& g, const NeedsGrad&) {
                  // Each output's gradient goes to its window's argmax (pre-zeroed grad_x).
                  Tensor gx = empty(x4_shape, g[0].options());  // kernels write every element
                  if (g[0].numel() > 0) {
                    backend_of(gx).max_pool2d_backward(grad_nchw(g[0]), si.get(), gx);
                  }
                  return TensorList{gx.as_strided_raw(x_shape, contiguous_strides(x_shape), 0)};
                });
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options) {
  GRADUS_PROFILE_OP("avg_pool2d");
  const PoolSetup s = pool_setup("avg_pool2d", x, options, /*is_max=*/false);
  Tensor out = new_empty({s.x4.size(0), s.x4.size(1), s.out_h, s.out_w}, x.dtype(), x.device());
  if (out.numel() > 0) backend_of(x).avg_pool2d(s.x4, out, s.args);
  return record("avg_pool2d", unbatch(out, s.batched), {x},
                [args = s.args, x4_shape = s.x4.sizes(), x_shape = x.sizes()](const TensorList& g,
                                                                              const NeedsGrad&) {
                  Tensor gx = empty(x4_shape, g[0].options());  // kernels write every element
                  if (g[0].numel() > 0) {
                    backend_of(gx).avg_pool2d_backward(grad_nchw(g[0]), gx, args);
                  }
                  return TensorList{gx.as_strided_raw(x_shape, contiguous_strides(x_shape), 0)};
                });
}

Tensor adaptive_avg_pool2d(const Tensor& x, const std::vector<int64_t>& output_size) {
  GRADUS_PROFILE_OP("adaptive_avg_pool2d");
  const char* op = "adaptive_avg_pool2d";
  check_defined(op, {&x});
  check_floating(op, x);
  const bool batched = x.dim() == 4;
  const Tensor x4 = as_nchw(op, x);
  const Pair os = pair_arg(op, "output_size", output_size);
  check_positive(op, "output_size", os);
  GRADUS_CHECK(x4.size(2) > 0 && x4.size(3) > 0, ShapeError, op,
               ": input spatial size must be non-empty, got ", shape_str(x.sizes()));
  Tensor out = new_empty({x4.size(0), x4.size(1), os.h, os.w}, x.dtype(), x.device());
  if (out.numel() > 0) backend_of(x).adaptive_avg_pool2d(x4, out);
  return record(
      op, unbatch(out, batched), {x},
      [x4_shape = x4.sizes(), x_shape = x.sizes()](const TensorList& g, const NeedsGrad&) {
        Tensor gx = empty(x4_shape, g[0].options());  // kernels write every element
        if (g[0].numel() > 0) {
          backend_of(gx).adaptive_avg_pool2d_backward(grad_nchw(g[0]), gx);
        }
        return TensorList{gx.as_strided_raw(x_shape, contiguous_strides(x_shape), 0)};
      });
}

}  // namespace gradus
