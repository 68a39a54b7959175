// Host side of the fused NN kernels (softmax, cross-entropy, norms, pooling): contiguous inputs
// in the kernel's dtype, contiguous outputs (through temporaries when the caller's are not), then
// one launcher call.
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/staging.h"
#include "gradus/core/determinism.h"

namespace gradus::backend::cuda {
namespace {

// Contiguous outputs of a given dtype; copied back into the caller's tensors by finish().
struct Outs {
  CudaBackend& be;
  std::vector<std::pair<Tensor, Tensor>> back;
  // read_too: the kernel also reads the old values (running statistics).
  Tensor get(const Tensor& t, DType dtype, bool read_too = false) {
    if (!t.defined()) return t;
    if (t.is_contiguous() && t.dtype() == dtype) return t;
    Tensor c = empty(t.sizes(), {dtype, t.device()});
    if (read_too) be.copy(t, c);
    back.emplace_back(c, t);
    return c;
  }
  Tensor get(const Tensor& t, bool read_too = false) {
    return t.defined() ? get(t, t.dtype(), read_too) : t;
  }
  void finish() {
    for (auto& [c, t] : back) be.copy(c, t);
  }
};

void* ptr(const Tensor& t) {
  return t.defined() ? t.raw_data() : nullptr;
}
DType dt(const Tensor& t, DType fallback) {
  return t.defined() ? t.dtype() : fallback;
}

// What layer_norm_backward and batch_norm_backward share: contiguous grad_out, x, weight and
// saved statistics, contiguous gradient outputs (the parameter gradients in one dtype, pdt), and
// the NormArgs describing them. The outputs are registered with `o`.
struct NormBackward {
  DType pdt;
  Tensor grad, x, weight, mean, rstd, grad_x, grad_weight, grad_bias;
  NormArgs args;
};
NormBackward stage_norm_backward(CudaBackend& be, Outs& o, const Tensor& grad_out, const Tensor& x,
                                 const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                 const Tensor& grad_x, const Tensor& grad_weight,
                                 const Tensor& grad_bias) {
  NormBackward b;
  const DType t = x.dtype();
  b.pdt =
      grad_weight.defined() ? grad_weight.dtype() : (grad_bias.defined() ? grad_bias.dtype() : t);
  b.grad = contiguous_as(be, grad_out, t);
  b.x = contiguous_as(be, x);
  b.weight = contiguous_as(be, weight);
  b.rstd = contiguous_as(be, rstd);
  b.mean = mean.defined() ? contiguous_as(be, mean, rstd.dtype()) : Tensor();  // none: RMS norm
  b.grad_x = o.get(grad_x, t);
  b.grad_weight = o.get(grad_weight, b.pdt);
  b.grad_bias = o.get(grad_bias, b.pdt);
  b.args.dtype = t;
  b.args.x = b.x.raw_data();
  b.args.weight = ptr(b.weight);
  b.args.weight_dtype = dt(b.weight, t);
  b.args.mean = ptr(b.mean);
  b.args.rstd = b.rstd.raw_data();
  b.args.stat_dtype = rstd.dtype();
  return b;
}

int64_t last_dim(const Tensor& t) {
  return t.dim() == 0 ? 1 : t.size(t.dim() - 1);
}

PoolShape pool_shape(const Tensor& in, const Tensor& out) {
  const int64_t d = in.dim();
  PoolShape s;
  s.h = in.size(d - 2);
  s.w = in.size(d - 1);
  s.oh = out.size(d - 2);
  s.ow = out.size(d - 1);
  s.planes = s.h * s.w > 0 ? in.numel() / (s.h * s.w) : 0;
  return s;
}

}  // namespace

// ------------------------------------------------------------------------------- softmax
void CudaBackend::softmax(const Tensor& x, const Tensor& out, bool log) {
  if (x.numel() == 0) return;
  DeviceGuard guard(out);
  Outs o{*this, {}};
  const Tensor xc = contiguous_as(*this, x, out.dtype()), oc = o.get(out);
  const int64_t cols = last_dim(x), rows = x.numel() / cols;
  launch_softmax(xc.raw_data(), oc.raw_data(), oc.dtype(), rows, cols, log,
                 stream_of(out.device().index()));
  o.finish();
}

void CudaBackend::softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in,
                                   bool log) {
  if (y.numel() == 0) return;
  DeviceGuard guard(grad_in);
  Outs o{*this, {}};
  const DType t = grad_in.dtype();
  const Tensor gc = contiguous_as(*this, grad_out, t), yc = contiguous_as(*this, y, t),
               oc = o.get(grad_in);
  const int64_t cols = last_dim(y), rows = y.numel() / cols;
  launch_softmax_backward(gc.raw_data(), yc.raw_data(), oc.raw_data(), t, rows, cols, log,
                          stream_of(grad_in.device().index()));
  o.finish();
}

// ------------------------------------------------------------------------------- cross entropy
namespace {

struct CeSetup {
  CrossEntropyArgs a;
  Tensor logits, weight, wsum;  // keep the temporaries alive
};

CeSetup ce_setup(CudaBackend& be, const Tensor& logits, const Tensor& target, const Tensor& weight,
                 int64_t ignore_index, double label_smoothing) {
  CeSetup s;
  s.logits = contiguous_as(be, logits);
  s.a.logits = s.logits.raw_data();
  s.a.dtype = s.logits.dtype();
  s.a.n = logits.size(0);
  s.a.c = logits.dim() > 1 ? logits.size(1) : 1;
  s.a.target = target.raw_data();
  s.a.target_dtype = target.dtype();
  s.a.target_stride = target.dim() == 0 ? 0 : target.stride(0);
  s.a.ignore_index = ignore_index;
  s.a.label_smoothing = label_smoothing;
  if (weight.defined()) {
    s.weight = contiguous_as(be, weight);
    s.a.weight = s.weight.raw_data();
    s.a.weight_dtype = s.weight.dtype();
    if (label_smoothing != 0.0) {  // backward needs sum_c w_c, kept on the device
      const Shape ones(static_cast<size_t>(s.weight.dim()), 1);
      s.wsum = empty(ones, {DType::f64, weight.device()});
      std::vector<int64_t> dims;
      for (int64_t d = 0; d < s.weight.dim(); ++d) dims.push_back(d);
      if (dims.empty()) {
        be.copy(s.weight, s.wsum);
      } else {
        be.reduce(ReduceOp::sum, s.weight, s.wsum, dims);
      }
      s.a.weight_sum = static_cast<const double*>(s.wsum.raw_data());
    }
  }
  return s;
}

}  // namespace

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                                int64_t ignore_index, double label_smoothing, const Tensor& loss,
                                const Tensor& lse) {
  if (logits.numel() == 0) return;
  DeviceGuard guard(logits);
  const CeSetup s = ce_setup(*this, logits, target, weight, ignore_index, label_smoothing);
  Outs o{*this, {}};
  const DType ldt = loss.dtype();
  const Tensor lc = o.get(loss, ldt), sc = o.get(lse, ldt);
  launch_cross_entropy(s.a, lc.raw_data(), sc.raw_data(), ldt, stream_of(logits.device().index()));
  o.finish();
}

void CudaBackend::cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits,
                                         const Tensor& target, const Tensor& weight,
                                         int64_t ignore_index, double label_smoothing,
                                         const Tensor& lse, const Tensor& grad_logits) {
  if (logits.numel() == 0) return;
  DeviceGuard guard(logits);
  const CeSetup s = ce_setup(*this, logits, target, weight, ignore_index, label_smoothing);
  const DType ldt = lse.dtype();
  // grad_loss may be broadcast (stride 0); other layouts are made contiguous.
  Tensor g = grad_loss;
  const bool strided_ok = g.dtype() == ldt && (g.dim() == 0 || g.dim() == 1);
  if (!strided_ok) g = contiguous_as(*this, grad_loss, ldt);
  const int64_t gstride = g.dim() == 0 ? 0 : g.stride(0);
  const Tensor lc = contiguous_as(*this, lse);
  Outs o{*this, {}};
  const Tensor gx = o.get(grad_logits, s.a.dtype);
  launch_cross_entropy_backward(s.a, g.raw_data(), gstride, lc.raw_data(), ldt, gx.raw_data(),
                                stream_of(logits.device().index()));
  o.finish();
}

// ------------------------------------------------------------------------------- swiglu
void CudaBackend::swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                                  const Tensor& grad_gate, const Tensor& grad_up) {
  if (grad.numel() == 0) return;
  DeviceGuard guard(grad);
  launch_swiglu_backward(grad.raw_data(), gate.raw_data(), up.raw_data(), grad_gate.raw_data(),
                         grad_up.raw_data(), grad.numel(), grad.dtype(),
                         stream_of(grad.device().index()));
}

// ------------------------------------------------------------------------------- rotary
void CudaBackend::rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin,
                                   bool inverse, const Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  Outs o{*this, {}};
  const DType t = out.dtype();
  // x keeps its (B, H, T) strides; a non-unit last dim or another dtype is copied first.
  const Tensor xc = x.dtype() == t && x.stride(3) == 1 ? x : contiguous_as(*this, x, t);
  const Tensor cc = contiguous_as(*this, cos, t), sc = contiguous_as(*this, sin, t);
  // out keeps its (B, H, T) strides too (the heads of a projection); other layouts are staged.
  const Tensor oc = out.stride(3) == 1 ? out : o.get(out);
  RotaryArgs a;
  a.dtype = t;
  a.b = xc.size(0);
  a.h = xc.size(1);
  a.t = xc.size(2);
  a.d = xc.size(3);
  a.sb = xc.stride(0);
  a.sh = xc.stride(1);
  a.st = xc.stride(2);
  a.osb = oc.stride(0);
  a.osh = oc.stride(1);
  a.ost = oc.stride(2);
  a.inverse = inverse;
  launch_rotary_embedding(a, xc.raw_data(), cc.raw_data(), sc.raw_data(), oc.raw_data(),
                          stream_of(out.device().index()));
  o.finish();
}

// ------------------------------------------------------------------------------- norms
void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                             const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const int64_t rows = rstd.numel();
  if (rows == 0 || x.numel() == 0) return;
  DeviceGuard guard(x);
  const int64_t cols = x.numel() / rows;
  Outs o{*this, {}};
  const Tensor xc = contiguous_as(*this, x), wc = contiguous_as(*this, weight),
               bc = contiguous_as(*this, bias);
  const Tensor oc = o.get(out, x.dtype()), rc = o.get(rstd);
  const Tensor mc = mean.defined() ? o.get(mean, rstd.dtype()) : Tensor();  // none: RMS norm
  NormArgs a;
  a.dtype = x.dtype();
  a.x = xc.raw_data();
  a.weight = ptr(wc);
  a.weight_dtype = dt(wc, a.dtype);
  a.bias = ptr(bc);
  a.bias_dtype = dt(bc, a.dtype);
  a.out = oc.raw_data();
  a.mean = ptr(mc);
  a.rstd = rc.raw_data();
  a.stat_dtype = rstd.dtype();
  a.eps = eps;
  launch_layer_norm(a, rows, cols, stream_of(x.device().index()));
  o.finish();
}

void CudaBackend::layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                      const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                                      const Tensor& grad_weight, const Tensor& grad_bias) {
  const int64_t rows = rstd.numel();
  if (rows == 0 || x.numel() == 0) {
    if (grad_weight.defined()) fill(grad_weight, 0.0);
    if (grad_bias.defined()) fill(grad_bias, 0.0);
    return;
  }
  DeviceGuard guard(x);
  const int device = x.device().index();
  const int64_t cols = x.numel() / rows;
  Outs o{*this, {}};
  const NormBackward b = stage_norm_backward(*this, o, grad_out, x, weight, mean, rstd, grad_x,
                                             grad_weight, grad_bias);
  const size_t ws_bytes = b.grad_weight.defined() || b.grad_bias.defined()
                              ? layer_norm_backward_workspace_bytes(rows, cols)
                              : 0;
  Workspace ws(ws_bytes, device, "layer_norm_backward");
  launch_layer_norm_backward(b.args, b.grad.raw_data(), ptr(b.grad_x), ptr(b.grad_weight),
                             ptr(b.grad_bias), b.pdt, rows, cols, ws.data(), stream_of(device));
  o.finish();
}

void CudaBackend::batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                             const Tensor& running_mean, const Tensor& running_var, bool training,
                             double momentum, double eps, const Tensor& out,
                             const Tensor& save_mean, const Tensor& save_rstd) {
  DeviceGuard guard(x);
  const int device = x.device().index();
  const int64_t n = x.dim() > 0 ? x.size(0) : 1, c = x.dim() > 1 ? x.size(1) : 1;
  const int64_t s = n * c > 0 ? x.numel() / (n * c) : 0;
  GRADUS_CHECK(n * s < (int64_t{1} << 31), ValueError,
               "batch_norm: cuda kernels support at most 2^31 elements per channel, got ",
               shape_str(x.sizes()));
  const DType rdt = running_mean.defined()
                        ? running_mean.dtype()
                        : (running_var.defined() ? running_var.dtype() : DType::f32);
  Outs o{*this, {}};
  const Tensor xc = contiguous_as(*this, x), wc = contiguous_as(*this, weight),
               bc = contiguous_as(*this, bias);
  const Tensor oc = o.get(out, x.dtype());
  const Tensor rmc = o.get(running_mean, rdt, true), rvc = o.get(running_var, rdt, true);
  const DType sdt = save_mean.defined() ? save_mean.dtype() : DType::f32;
  const Tensor smc = training ? o.get(save_mean, sdt) : Tensor();
  const Tensor src = training ? o.get(save_rstd, sdt) : Tensor();
  NormArgs a;
  a.dtype = x.dtype();
  a.x = xc.raw_data();
  a.weight = ptr(wc);
  a.weight_dtype = dt(wc, a.dtype);
  a.bias = ptr(bc);
  a.bias_dtype = dt(bc, a.dtype);
  a.out = oc.raw_data();
  a.mean = ptr(smc);
  a.rstd = ptr(src);
  a.stat_dtype = sdt;
  a.eps = eps;
  Workspace ws(batch_norm_workspace_bytes(c), device, "batch_norm");
  launch_batch_norm(a, ptr(rmc), ptr(rvc), rdt, training, momentum, n, c, s, ws.data(),
                    stream_of(device));
  o.finish();
}

void CudaBackend::batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                      const Tensor& save_mean, const Tensor& save_rstd,
                                      const Tensor& grad_x, const Tensor& grad_weight,
                                      const Tensor& grad_bias) {
  DeviceGuard guard(x);
  const int device = x.device().index();
  const int64_t n = x.dim() > 0 ? x.size(0) : 1, c = x.dim() > 1 ? x.size(1) : 1;
  const int64_t s = n * c > 0 ? x.numel() / (n * c) : 0;
  Outs o{*this, {}};
  const NormBackward b = stage_norm_backward(*this, o, grad_out, x, weight, save_mean, save_rstd,
                                             grad_x, grad_weight, grad_bias);
  Workspace ws(batch_norm_workspace_bytes(c), device, "batch_norm_backward");
  launch_batch_norm_backward(b.args, b.grad.raw_data(), ptr(b.grad_x), ptr(b.grad_weight),
                             ptr(b.grad_bias), b.pdt, n, c, s, ws.data(), stream_of(device));
  o.finish();
}

// ------------------------------------------------------------------------------- pooling
void CudaBackend::max_pool2d(const Tensor& x, const Tensor& out, const Tensor& indices,
                             const Pool2dArgs& args) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  Outs o{*this, {}};
  const Tensor xc = contiguous_as(*this, x, out.dtype()), oc = o.get(out),
               ic = o.get(indices, DType::i64);
  launch_max_pool2d(xc.raw_data(), oc.raw_data(), static_cast<int64_t*>(ic.raw_data()), out.dtype(),
                    pool_shape(x, out), args, stream_of(out.device().index()));
  o.finish();
}

void CudaBackend::max_pool2d_backward(const Tensor& grad_out, const Tensor& indices,
                                      const Tensor& grad_x) {
  if (grad_x.numel() == 0) return;
  DeviceGuard guard(grad_x);
  const DType t = grad_x.dtype();
  const Tensor gc = contiguous_as(*this, grad_out, t),
               ic = contiguous_as(*this, indices, DType::i64);
  // Scatter-add into float (double for f64) accumulators, then round once.
  const DType acc_dt = t == DType::f64 ? DType::f64 : DType::f32;
  const bool direct = grad_x.is_contiguous() && t == acc_dt;
  Tensor acc = direct ? grad_x : empty(grad_x.sizes(), {acc_dt, grad_x.device()});
  fill(acc, 0.0);
  launch_max_pool2d_backward(gc.raw_data(), static_cast<const int64_t*>(ic.raw_data()),
                             acc.raw_data(), t, pool_shape(grad_x, grad_out), is_deterministic(),
                             stream_of(grad_x.device().index()));
  if (!direct) copy(acc, grad_x);
}

void CudaBackend::avg_pool2d(const Tensor& x, const Tensor& out, const Pool2dArgs& args) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  Outs o{*this, {}};
  const Tensor xc = contiguous_as(*this, x, out.dtype()), oc = o.get(out);
  launch_avg_pool2d(xc.raw_data(), oc.raw_data(), out.dtype(), pool_shape(x, out), args,
                    stream_of(out.device().index()));
  o.finish();
}

void CudaBackend::avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x,
                                      const Pool2dArgs& args) {
  if (grad_x.numel() == 0) return;
  DeviceGuard guard(grad_x);
  Outs o{*this, {}};
  const Tensor gc = contiguous_as(*this, grad_out, grad_x.dtype()), oc = o.get(grad_x);
  launch_avg_pool2d_backward(gc.raw_data(), oc.raw_data(), grad_x.dtype(),
                             pool_shape(grad_x, grad_out), args,
                             stream_of(grad_x.device().index()));
  o.finish();
}

void CudaBackend::adaptive_avg_pool2d(const Tensor& x, const Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  Outs o{*this, {}};
  const Tensor xc = contiguous_as(*this, x, out.dtype()), oc = o.get(out);
  launch_adaptive_avg_pool2d(xc.raw_data(), oc.raw_data(), out.dtype(), pool_shape(x, out),
                             stream_of(out.device().index()));
  o.finish();
}

void CudaBackend::adaptive_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x) {
  if (grad_x.numel() == 0) return;
  DeviceGuard guard(grad_x);
  Outs o{*this, {}};
  const Tensor gc = contiguous_as(*this, grad_out, grad_x.dtype()), oc = o.get(grad_x);
  launch_adaptive_avg_pool2d_backward(gc.raw_data(), oc.raw_data(), grad_x.dtype(),
                                      pool_shape(grad_x, grad_out),
                                      stream_of(grad_x.device().index()));
  o.finish();
}

}  // namespace gradus::backend::cuda
