// Normalisation and dropout: batch_norm, layer_norm, rms_norm, dropout.
//
// The fused kernels want contiguous inputs: batch norm sees x as [N, C, S] (S = spatial
// product), layer norm as [rows, cols] (cols = the normalised trailing dims). Affine parameters
// are computed in x's dtype (cast when they differ, e.g. f32 weights with a bf16 activation) and
// their gradients are cast back to the parameters' dtype.
#include <cmath>

#include "ops/autocast.h"
#include "ops/common.h"

namespace gradus {
namespace ops {
namespace {

// The statistics dtype of the norm kernels: f64 for f64 inputs, else f32.
DType stat_dtype(DType t) {
  return t == DType::f64 ? DType::f64 : DType::f32;
}

// t cast to dtype and made contiguous; undefined stays undefined.
Tensor param_raw(const Tensor& t, DType dtype) {
  return t.defined() ? contiguous_raw(cast_raw(t, dtype)) : Tensor();
}

// grad computed in x's dtype, returned in the parameter's dtype and shape.
Tensor param_grad(const Tensor& g, const InputMeta& m) {
  const Tensor r = g.sizes() == m.shape ? g : g.reshape(m.shape);
  return r.dtype() == m.dtype ? r : r.to(m.dtype);
}

void check_per_channel(const Tensor& t, int64_t c, const char* what, const Tensor& x) {
  if (!t.defined()) return;
  GRADUS_CHECK(t.dim() == 1 && t.size(0) == c, ShapeError, "batch_norm: ", what,
               " must have shape [", c, "] (one per channel of input ", shape_str(x.sizes()),
               "), got ", shape_str(t.sizes()));
  check_floating("batch_norm", t, what);
}

}  // namespace
}  // namespace ops

using namespace ops;

// ------------------------------------------------------------------------------------ batch norm
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  GRADUS_PROFILE_OP("batch_norm");
  // The running statistics are never cast: they are updated in place.
  if (AutocastInputs cast{"batch_norm", {&x, &weight, &bias}}) {
    return batch_norm(cast[0], running_mean, running_var, cast[1], cast[2], training, momentum,
                      eps);
  }
  const char* op = "batch_norm";
  check_defined(op, {&x});
  check_same_device(op, {&x, &running_mean, &running_var, &weight, &bias});
  check_floating(op, x);
  GRADUS_CHECK(x.dim() >= 2, ShapeError, "batch_norm: expected input [N, C] or [N, C, *], got ",
               shape_str(x.sizes()));
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t s = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  check_per_channel(running_mean, c, "running_mean", x);
  check_per_channel(running_var, c, "running_var", x);
  check_per_channel(weight, c, "weight", x);
  check_per_channel(bias, c, "bias", x);
  GRADUS_CHECK(running_mean.defined() == running_var.defined(), ValueError,
               "batch_norm: running_mean and running_var must be given together");
  GRADUS_CHECK(
      !running_mean.defined() || (running_mean.is_contiguous() && running_var.is_contiguous()),
      ValueError,
      "batch_norm: running statistics must be contiguous (they are updated "
      "in place)");
  // Without running statistics, batch statistics are used even in eval mode (PyTorch's rule).
  const bool use_batch_stats = training || !running_mean.defined();
  GRADUS_CHECK(!use_batch_stats || n * s > 1 || x.numel() == 0, ValueError,
               "batch_norm: expected more than 1 value per channel when training, got input ",
               shape_str(x.sizes()));

  const Tensor xc = contiguous_raw(x);
  const Tensor x3 = xc.as_strided_raw({n, c, s}, {c * s, s, 1}, xc.offset());
  const Tensor w = param_raw(weight, x.dtype()), b = param_raw(bias, x.dtype());
  const DType sd = stat_dtype(x.dtype());
  Tensor out = new_empty({n, c, s}, x.dtype(), x.device());
  Tensor save_mean = new_empty({c}, sd, x.device()), save_rstd = new_empty({c}, sd, x.device());
  // Training updates the running statistics; eval reads them; batch statistics without running
  // statistics (eval mode, none given) touch nothing. A checkpointed segment's recomputation
  // normalises with the same batch statistics but leaves the running ones as its forward left them.
  const bool update = training && running_mean.defined() && !in_checkpoint_recompute();
  const bool pass_running = update || !use_batch_stats;
  if (x.numel() > 0) {
    backend_of(x).batch_norm(x3, w, b, pass_running ? running_mean : Tensor(),
                             pass_running ? running_var : Tensor(), use_batch_stats, momentum, eps,
                             out, save_mean, save_rstd);
    if (update) {  // the running statistics changed in place
      running_mean.bump_version();
      running_var.bump_version();
    }
  }
  out = out.as_strided_raw(x.sizes(), contiguous_strides(x.sizes()), 0);

  if (use_batch_stats) {
    return record(
        op, out, {x, weight, bias},
        [sx = SavedTensor(x3), sw = SavedTensor(w), sm = SavedTensor(save_mean),
         sr = SavedTensor(save_rstd), mw = weight.defined() ? InputMeta(weight) : InputMeta(x),
         mb = bias.defined() ? InputMeta(bias) : InputMeta(x),
         x_shape = x.sizes()](const TensorList& g, const NeedsGrad& needs) {
          const Tensor xv = sx.get();
          const Tensor gc = contiguous_raw(cast_raw(g[0], xv.dtype()));
          const Tensor g3 = gc.as_strided_raw(xv.sizes(), xv.strides(), gc.offset());
          const int64_t ch = xv.size(1);
          Tensor gx = new_empty(xv.sizes(), xv.dtype(), xv.device());
          Tensor gw = needs[1] ? new_empty({ch}, xv.dtype(), xv.device()) : Tensor();
          Tensor gb = needs[2] ? new_empty({ch}, xv.dtype(), xv.device()) : Tensor();
          if (xv.numel() > 0) {
            backend_of(gx).batch_norm_backward(g3, xv, sw.get(), sm.get(), sr.get(), gx, gw, gb);
          } else {
            if (gw.defined()) gw = zeros({ch}, xv.options());
            if (gb.defined()) gb = zeros({ch}, xv.options());
          }
          return TensorList{
              needs[0] ? gx.as_strided_raw(x_shape, contiguous_strides(x_shape), 0) : Tensor(),
              needs[1] ? param_grad(gw, mw) : Tensor(), needs[2] ? param_grad(gb, mb) : Tensor()};
        });
  }
  // Eval mode with running statistics: a fixed per-channel affine map.
  return record(op, out, {x, weight, bias},
                [sx = SavedTensor(x), sw = SavedTensor(weight), srm = SavedTensor(running_mean),
                 srv = SavedTensor(running_var), eps, mx = InputMeta(x),
                 mw = weight.defined() ? InputMeta(weight) : InputMeta(x),
                 mb = bias.defined() ? InputMeta(bias) : InputMeta(x)](const TensorList& g,
                                                                       const NeedsGrad& needs) {
                  const Tensor xv = sx.get();
                  Shape bshape(xv.dim(), 1);
                  bshape[1] = xv.size(1);
                  std::vector<int64_t> other_dims;
                  for (int64_t i = 0; i < xv.dim(); ++i) {
                    if (i != 1) other_dims.push_back(i);
                  }
                  const Tensor rstd = rsqrt(add(srv.get(), eps)).reshape(bshape);
                  TensorList grads(3);
                  if (needs[0]) {
                    const Tensor scale = sw.defined() ? mul(sw.get().reshape(bshape), rstd) : rstd;
                    grads[0] = mul(g[0], scale).to(mx.dtype);
                  }
                  if (needs[1]) {
                    const Tensor xhat = mul(sub(xv, srm.get().reshape(bshape)), rstd);
                    grads[1] = param_grad(sum(mul(g[0], xhat), other_dims), mw);
                  }
                  if (needs[2]) grads[2] = param_grad(sum(g[0], other_dims), mb);
                  return grads;
                });
}

// ------------------------------------------------------------------------- layer norm, rms norm
namespace {
// One kernel for both: layer norm centres each row (and may add a bias); RMS norm does not (the
// backend is given no mean to write).
Tensor normalize_rows(const char* op, const Tensor& x, const Shape& normalized_shape,
                      const Tensor& weight, const Tensor& bias, double eps, bool centred) {
  check_defined(op, {&x});
  check_same_device(op, {&x, &weight, &bias});
  check_floating(op, x);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool trailing_match = k >= 1 && k <= x.dim();
  for (int64_t i = 0; trailing_match && i < k; ++i) {
    trailing_match = x.size(x.dim() - k + i) == normalized_shape[i];
  }
  GRADUS_CHECK(trailing_match, ShapeError, op, ": normalized_shape ", shape_str(normalized_shape),
               " does not match the trailing dimensions of input ", shape_str(x.sizes()));
  for (const Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;
    GRADUS_CHECK(t->sizes() == normalized_shape, ShapeError, op, ": ",
                 t == &weight ? "weight" : "bias", " must have shape ", shape_str(normalized_shape),
                 " (the normalized_shape), got ", shape_str(t->sizes()));
    check_floating(op, *t, t == &weight ? "weight" : "bias");
  }
  GRADUS_CHECK(std::isfinite(eps) && eps >= 0, ValueError, op,
               ": eps must be finite and >= 0, got ", eps);
  const int64_t cols = shape_numel(normalized_shape);
  int64_t rows = 1;
  for (int64_t i = 0; i < x.dim() - k; ++i) rows *= x.size(i);
  const Tensor xc = contiguous_raw(x);
  const Tensor x2 = xc.as_strided_raw({rows, cols}, {cols, 1}, xc.offset());
  const Tensor w = param_raw(weight, x.dtype()), b = param_raw(bias, x.dtype());
  const Tensor w1 = w.defined() ? w.as_strided_raw({cols}, {1}, w.offset()) : Tensor();
  const Tensor b1 = b.defined() ? b.as_strided_raw({cols}, {1}, b.offset()) : Tensor();
  const DType sd = stat_dtype(x.dtype());
  Tensor out = new_empty({rows, cols}, x.dtype(), x.device());
  Tensor mean = centred ? new_empty({rows}, sd, x.device()) : Tensor();
  Tensor rstd = new_empty({rows}, sd, x.device());
  if (out.numel() > 0) backend_of(x).layer_norm(x2, w1, b1, eps, out, mean, rstd);
  out = out.as_strided_raw(x.sizes(), contiguous_strides(x.sizes()), 0);
  return record(
      op, out, {x, weight, bias},
      [sx = SavedTensor(x2), sw = SavedTensor(w1), sm = SavedTensor(mean), sr = SavedTensor(rstd),
       x_shape = x.sizes(), mw = weight.defined() ? InputMeta(weight) : InputMeta(x),
       mb = bias.defined() ? InputMeta(bias) : InputMeta(x)](const TensorList& g,
                                                             const NeedsGrad& needs) {
        const Tensor xv = sx.get();
        const int64_t c = xv.size(1);
        const Tensor gc = contiguous_raw(cast_raw(g[0], xv.dtype()));
        const Tensor g2 = gc.as_strided_raw(xv.sizes(), {c, 1}, gc.offset());
        Tensor gx = new_empty(xv.sizes(), xv.dtype(), xv.device());
        // Weight/bias gradients are sums over rows: zero when there are none.
        Tensor gw = needs[1] ? zeros({c}, xv.options()) : Tensor();
        Tensor gb = needs[2] ? zeros({c}, xv.options()) : Tensor();
        if (xv.numel() > 0) {
          backend_of(gx).layer_norm_backward(g2, xv, sw.get(), sm.get(), sr.get(), gx, gw, gb);
        }
        return TensorList{
            needs[0] ? gx.as_strided_raw(x_shape, contiguous_strides(x_shape), 0) : Tensor(),
            needs[1] ? param_grad(gw, mw) : Tensor(), needs[2] ? param_grad(gb, mb) : Tensor()};
      });
}
}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  GRADUS_PROFILE_OP("layer_norm");
  if (AutocastInputs cast{"layer_norm", {&x, &weight, &bias}}) {
    return layer_norm(cast[0], normalized_shape, cast[1], cast[2], eps);
  }
  return normalize_rows("layer_norm", x, normalized_shape, weight, bias, eps, true);
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, double eps) {
  GRADUS_PROFILE_OP("rms_norm");
  if (AutocastInputs cast{"rms_norm", {&x, &weight}}) {
    return rms_norm(cast[0], normalized_shape, cast[1], eps);
  }
  return normalize_rows("rms_norm", x, normalized_shape, weight, Tensor(), eps, false);
}

// ------------------------------------------------------------------------------------ dropout
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  GRADUS_PROFILE_OP("dropout");
  check_defined("dropout", {&x});
  GRADUS_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout: probability p must be in [0, 1], got ",
               p);
  if (!training || p == 0.0) return x;
  check_floating("dropout", x);
  if (p == 1.0) return mul(x, 0.0);  // everything dropped (and no division by 1 - p = 0)
  Generator& g = gen != nullptr ? *gen : default_generator();
  // One Philox block gives 4 uniforms: ceil(numel / 4) blocks (random.h's layout), or the whole
  // batch's inside a pipeline micro-batch (reserve_rows).
  const int64_t rows = x.dim() > 0 ? x.size(0) : 1;
  const RowDraw draw = reserve_rows(g, rows, rows > 0 ? x.numel() / rows : 0, "dropout");
  Tensor out = new_empty(x.sizes(), x.dtype(), x.device());
  Tensor mask = new_empty(x.sizes(), DType::u8, x.device());
  if (out.numel() > 0 && draw.lane == 0) {
    backend_of(x).dropout(contiguous_raw(x), p, draw.state, out, mask);
  } else if (out.numel() > 0) {
    // The slice starts mid-block: draw for `lane` leading values too, then drop them.
    NoGradGuard no_grad;
    const Tensor padded = cat({zeros({draw.lane}, x.options()), x.detach().reshape({-1})}, 0);
    Tensor pout = new_empty(padded.sizes(), x.dtype(), x.device());
    Tensor pmask = new_empty(padded.sizes(), DType::u8, x.device());
    backend_of(x).dropout(padded, p, draw.state, pout, pmask);
    out.copy_(pout.narrow(0, draw.lane, x.numel()).reshape(x.sizes()));
    mask.copy_(pmask.narrow(0, draw.lane, x.numel()).reshape(x.sizes()));
  }
  return record(
      "dropout", out, {x},
      [sm = SavedTensor(mask), scale = 1.0 / (1.0 - p)](const TensorList& gr, const NeedsGrad&) {
        return TensorList{mul(mul(gr[0], sm.get()), scale)};
      });
}

}  // namespace gradus
