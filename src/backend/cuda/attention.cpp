// Scaled dot-product attention on CUDA (the fused op of gradus/ops.h), by one of two paths:
//  * materialised, while the scores fit gradus::cuda::attention_scores_limit(): cuBLASLt computes
//    s = scale q k^T into a [B * H, Tq, Tk] buffer, a row kernel (attention.cu) turns it into
//    probabilities and lse, and a GEMM multiplies by v. The backward recomputes P from lse and
//    runs four more GEMMs (dV = Pd^T dO, dP = dO v^T, dQ = scale dS k, dK = scale dS^T q).
//    16-bit inputs are computed in float32 (their scores and probabilities would lose too much
//    in 16 bits) and rounded once at the end. Deterministic: GEMMs and row kernels only.
//  * streaming (attention.cu): a warp per row walking the other sequence, O(T) memory, for
//    problems whose scores do not fit. Both save the same lse, so a backward may take either.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/staging.h"
#include "gradus/core/cuda.h"

namespace gradus::backend::cuda {
namespace {

AttentionShape attention_shape(const Tensor& q, const Tensor& v) {
  return {q.size(0) * q.size(1), q.size(2), v.size(2), q.size(3), v.size(3)};
}

void check_head(const Tensor& q, const Tensor& v) {
  GRADUS_CHECK(q.size(3) <= kMaxAttentionHead && v.size(3) <= kMaxAttentionHead, ShapeError,
               "scaled_dot_product_attention: the streaming CUDA kernel supports head sizes up ",
               "to ", kMaxAttentionHead, ", got ", q.size(3), " and ", v.size(3),
               " (raise gradus::cuda::set_attention_scores_limit to materialise the scores)");
}

DType compute_of(DType t) {
  return t == DType::f64 ? DType::f64 : DType::f32;
}

// The backward holds two score-sized buffers; the forward one. Both paths are decided alike.
bool materialise(const AttentionShape& s, DType compute) {
  const double bytes = 2.0 * static_cast<double>(s.batch) * static_cast<double>(s.tq) *
                       static_cast<double>(s.tk) * static_cast<double>(dtype_size(compute));
  return bytes <= static_cast<double>(gradus::cuda::attention_scores_limit());
}

// A contiguous [B, H, T, D] tensor as [B * H, T, D].
Tensor packed(const Tensor& t) {
  const int64_t rows = t.size(2), cols = t.size(3);
  return t.as_strided_raw({t.size(0) * t.size(1), rows, cols}, {rows * cols, cols, 1}, t.offset());
}

// Runs fn(target) with a packed contiguous target of dtype `compute`, then makes `out` hold it.
template <typename F>
void into_packed(CudaBackend& be, const Tensor& out, DType compute, F&& fn) {
  if (out.dtype() == compute) {
    into_contiguous(be, out, [&](const Tensor& oc) { fn(packed(oc)); });
    return;
  }
  const Tensor tmp = empty(out.sizes(), {compute, out.device()});
  fn(packed(tmp));
  be.copy(tmp, out);
}

GemmArgs gemm_args(bool trans_a, bool trans_b, double alpha) {
  GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.alpha = alpha;
  return g;
}

}  // namespace

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                            const Tensor& lse, const AttentionArgs& args) {
  if (args.dropout_p > 0) {
    refuse_in_capture(
        "attention dropout (it draws a new mask at each call; a replay would repeat the mask "
        "drawn at capture)");
  }
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  const cudaStream_t stream = stream_of(out.device().index());
  const AttentionShape s = attention_shape(q, v);
  const DType cd = compute_of(q.dtype());
  if (materialise(s, cd)) {
    const Tensor qc = contiguous_as(*this, q, cd), kc = contiguous_as(*this, k, cd),
                 vc = contiguous_as(*this, v, cd);
    const Tensor probs = empty({s.batch, s.tq, s.tk}, {cd, out.device()});
    gemm(packed(qc), packed(kc), probs, gemm_args(false, true, args.scale));
    launch_attention_softmax(s, args, probs.raw_data(), lse.raw_data(), cd, stream);
    into_packed(*this, out, cd,
                [&](const Tensor& o) { gemm(probs, packed(vc), o, gemm_args(false, false, 1)); });
    return;
  }
  check_head(q, v);
  const Tensor qc = contiguous_as(*this, q), kc = contiguous_as(*this, k),
               vc = contiguous_as(*this, v);
  into_contiguous(*this, out, [&](const Tensor& oc) {
    launch_attention(s, args, qc.raw_data(), kc.raw_data(), vc.raw_data(), oc.raw_data(),
                     lse.raw_data(), q.dtype(), stream);
  });
}

void CudaBackend::attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor& out, const Tensor& lse,
                                     const Tensor& grad_q, const Tensor& grad_k,
                                     const Tensor& grad_v, const AttentionArgs& args) {
  DeviceGuard guard(q);
  const cudaStream_t stream = stream_of(q.device().index());
  const AttentionShape s = attention_shape(q, v);
  const DType cd = compute_of(q.dtype());
  if (materialise(s, cd)) {
    const Tensor goc = contiguous_as(*this, grad_out, cd), qc = contiguous_as(*this, q, cd),
                 kc = contiguous_as(*this, k, cd), vc = contiguous_as(*this, v, cd),
                 oc = contiguous_as(*this, out, cd);
    const Tensor delta = empty({s.batch, s.tq}, {cd, q.device()});
    launch_attention_delta(s, goc.raw_data(), oc.raw_data(), delta.raw_data(), cd, stream);
    const Tensor probs = empty({s.batch, s.tq, s.tk}, {cd, q.device()});
    gemm(packed(qc), packed(kc), probs, gemm_args(false, true, args.scale));
    // Without dropout the dropped-out probabilities are P itself; either way the second buffer
    // then takes dP (the dV GEMM before it has read it: one stream orders them).
    const bool dropout = args.dropout_p > 0;
    const Tensor second = empty({s.batch, s.tq, s.tk}, {cd, q.device()});
    launch_attention_recompute(s, args, probs.raw_data(), dropout ? second.raw_data() : nullptr,
                               lse.raw_data(), cd, stream);
    into_packed(*this, grad_v, cd, [&](const Tensor& gv) {
      gemm(dropout ? second : probs, packed(goc), gv, gemm_args(true, false, 1));
    });
    gemm(packed(goc), packed(vc), second, gemm_args(false, true, 1));
    launch_attention_score_grad(s, args, probs.raw_data(), second.raw_data(), delta.raw_data(), cd,
                                stream);
    into_packed(*this, grad_q, cd, [&](const Tensor& gq) {
      gemm(probs, packed(kc), gq, gemm_args(false, false, args.scale));
    });
    into_packed(*this, grad_k, cd, [&](const Tensor& gk) {
      gemm(probs, packed(qc), gk, gemm_args(true, false, args.scale));
    });
    return;
  }
  check_head(q, v);
  const Tensor goc = contiguous_as(*this, grad_out), qc = contiguous_as(*this, q),
               kc = contiguous_as(*this, k), vc = contiguous_as(*this, v),
               oc = contiguous_as(*this, out);
  const Tensor delta = empty({s.batch, s.tq}, {lse.dtype(), q.device()});
  into_contiguous(*this, grad_q, [&](const Tensor& gq) {
    into_contiguous(*this, grad_k, [&](const Tensor& gk) {
      into_contiguous(*this, grad_v, [&](const Tensor& gv) {
        launch_attention_backward(s, args, goc.raw_data(), qc.raw_data(), kc.raw_data(),
                                  vc.raw_data(), oc.raw_data(), lse.raw_data(), delta.raw_data(),
                                  gq.raw_data(), gk.raw_data(), gv.raw_data(), q.dtype(), stream);
      });
    });
  });
}

}  // namespace gradus::backend::cuda
