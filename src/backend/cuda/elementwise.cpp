// Host side of the elementwise, copy and reduction kernels: builds iterators from tensors,
// normalises dtypes the kernels do not take directly, and cuts oversized problems.
#include <algorithm>
#include <numeric>

#include "backend/common/layout.h"
#include "backend/common/op_meta.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/iter.h"
#include "backend/cuda/runtime.h"

namespace gradus::backend::cuda {
namespace {

Tensor temp_like(const Tensor& t, DType dtype) {
  return empty(t.sizes(), {dtype, t.device()});
}

// A contiguous row-major copy of t's values (any strides, broadcast included).
Tensor materialize(CudaBackend& be, const Tensor& t, DType dtype) {
  Tensor c = temp_like(t, dtype);
  be.copy(t, c);
  return c;
}

}  // namespace

// ------------------------------------------------------------------------------- movement
void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  if (dst.numel() == 0) return;
  DeviceGuard guard(dst);
  cudaStream_t stream = stream_of(dst.device().index());
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous() &&
      src.sizes() == dst.sizes()) {
    if (src.raw_data() != dst.raw_data()) {
      GRADUS_CUDA_CHECK("copy",
                        cudaMemcpyAsync(dst.raw_data(), src.raw_data(),
                                        static_cast<size_t>(dst.numel()) * dst.element_size(),
                                        cudaMemcpyDeviceToDevice, stream));
    }
    return;
  }
  for_each_piece<2>(make_layout<2>(dst.sizes(), {&dst, &src}),
                    [&](const Iter<2>& it) { launch_copy(it, stream); });
}

void CudaBackend::fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  DeviceGuard guard(dst);
  cudaStream_t stream = stream_of(dst.device().index());
  if (value == 0.0 && !std::signbit(value) && dst.is_contiguous()) {
    GRADUS_CUDA_CHECK(
        "fill", cudaMemsetAsync(dst.raw_data(), 0,
                                static_cast<size_t>(dst.numel()) * dst.element_size(), stream));
    return;
  }
  for_each_piece<1>(make_layout<1>(dst.sizes(), {&dst}),
                    [&](const Iter<1>& it) { launch_fill(it, value, stream); });
}

void CudaBackend::arange(const Tensor& dst, double start, double step) {
  if (dst.numel() == 0) return;
  DeviceGuard guard(dst);
  launch_arange(dst.raw_data(), dst.dtype(), dst.numel(), start, step,
                stream_of(dst.device().index()));
}

// ------------------------------------------------------------------------------- elementwise
void CudaBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  cudaStream_t stream = stream_of(out.device().index());
  // The kernels compute in x's dtype and write it (bool for predicates).
  const DType want = common::output_dtype(op, x.dtype());
  if (out.dtype() != want) {
    Tensor tmp = temp_like(out, want);
    unary(op, x, tmp, a, b);
    copy(tmp, out);
    return;
  }
  for_each_piece<2>(make_layout<2>(out.sizes(), {&out, &x}),
                    [&](const Iter<2>& it) { launch_unary(op, it, a, b, stream); });
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
                         double alpha) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  cudaStream_t stream = stream_of(out.device().index());
  if (a.dtype() != b.dtype()) {
    const DType common = promote_types(a.dtype(), b.dtype());
    Tensor ac = a.dtype() == common ? a : materialize(*this, a, common);
    Tensor bc = b.dtype() == common ? b : materialize(*this, b, common);
    binary(op, ac, bc, out, alpha);
    return;
  }
  const DType want = common::output_dtype(op, a.dtype());
  if (out.dtype() != want) {
    Tensor tmp = temp_like(out, want);
    binary(op, a, b, tmp, alpha);
    copy(tmp, out);
    return;
  }
  for_each_piece<3>(make_layout<3>(out.sizes(), {&out, &a, &b}),
                    [&](const Iter<3>& it) { launch_binary(op, it, alpha, stream); });
}

void CudaBackend::ternary(TernaryOp op, const Tensor& a, const Tensor& b, const Tensor& c,
                          const Tensor& out, double alpha) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  cudaStream_t stream = stream_of(out.device().index());
  const DType values = b.dtype();
  const DType cond = op == TernaryOp::where ? DType::boolean : values;
  if (a.dtype() != cond || c.dtype() != values || out.dtype() != values) {
    Tensor ac = a.dtype() == cond ? a : materialize(*this, a, cond);
    Tensor cc = c.dtype() == values ? c : materialize(*this, c, values);
    if (out.dtype() == values) {
      ternary(op, ac, b, cc, out, alpha);
    } else {
      Tensor tmp = temp_like(out, values);
      ternary(op, ac, b, cc, tmp, alpha);
      copy(tmp, out);
    }
    return;
  }
  for_each_piece<4>(make_layout<4>(out.sizes(), {&out, &a, &b, &c}),
                    [&](const Iter<4>& it) { launch_ternary(op, it, alpha, stream); });
}

// ------------------------------------------------------------------------------- reductions
namespace {

using Axis = common::ReduceAxis;

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out,
                         const std::vector<int64_t>& dims) {
  if (out.numel() == 0) return;
  if (x.numel() == 0) {
    fill(out, common::empty_reduction_value(op));
    return;
  }
  DeviceGuard guard(out);
  const int device = out.device().index();
  cudaStream_t stream = stream_of(device);
  std::vector<bool> is_reduced(static_cast<size_t>(x.dim()), false);
  for (int64_t d : dims) is_reduced[static_cast<size_t>(d)] = true;
  std::vector<Axis> kept_axes, red_axes;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const Axis a{x.size(d), x.stride(d), is_reduced[d] ? 0 : out.stride(d)};
    (is_reduced[d] ? red_axes : kept_axes).push_back(a);
  }
  const std::vector<Axis> kept = common::coalesce_axes(kept_axes),
                          red = common::coalesce_axes(red_axes);
  int64_t outputs = 1, count = 1;
  for (const Axis& a : kept) outputs *= a.size;
  for (const Axis& a : red) count *= a.size;

  // Too many dims for the kernels' fixed-size calculators: permute the reduced axes last and
  // copy, after which each side is one contiguous run.
  if (kept.size() > static_cast<size_t>(kMaxDims) || red.size() > static_cast<size_t>(kMaxDims)) {
    std::vector<int64_t> perm;
    Shape psizes, pstrides;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (!is_reduced[d]) perm.push_back(d);
    }
    for (int64_t d : dims) perm.push_back(d);
    for (int64_t d : perm) {
      psizes.push_back(x.size(d));
      pstrides.push_back(x.stride(d));
    }
    Tensor xp = materialize(*this, x.as_strided_raw(psizes, pstrides, x.offset()), x.dtype());
    const Shape flat = {outputs, count};
    Tensor x2 = xp.as_strided_raw(flat, contiguous_strides(flat), xp.offset());
    Tensor o2 = materialize(*this, out, out.dtype());
    Tensor o2v = o2.as_strided_raw({outputs, 1}, {1, 1}, o2.offset());
    reduce(op, x2, o2v, {1});
    copy(o2, out);
    return;
  }

  // More outputs than 32-bit indices reach: cut the outermost kept axis.
  if (outputs > kMaxKernelElements) {
    int64_t d0 = 0;
    while (is_reduced[static_cast<size_t>(d0)] || x.size(d0) == 1) ++d0;
    const int64_t size = x.size(d0);
    const int64_t chunk = std::max<int64_t>(1, kMaxKernelElements / (outputs / size));
    for (int64_t start = 0; start < size; start += chunk) {
      const int64_t len = std::min(chunk, size - start);
      Shape xs = x.sizes(), os = out.sizes();
      xs[static_cast<size_t>(d0)] = len;
      os[static_cast<size_t>(d0)] = len;
      reduce(op, x.as_strided_raw(xs, x.strides(), x.offset() + start * x.stride(d0)),
             out.as_strided_raw(os, out.strides(), out.offset() + start * out.stride(d0)), dims);
    }
    return;
  }
  // More reduced elements per output than 32-bit indices reach: reduce in two stages.
  if (count > kMaxKernelElements) {
    GRADUS_CHECK(op != ReduceOp::argmax && op != ReduceOp::argmin, ValueError,
                 "reduce: cuda argmax / argmin over more than 2^31 elements per output is not "
                 "supported (",
                 shape_str(x.sizes()), ")");
    // Stage 1 reduces chunks of the outermost reduced axis into a temporary that keeps that
    // axis (one entry per chunk); stage 2 reduces the temporary.
    int64_t dr = dims.front();
    for (int64_t d : dims) {
      if (x.size(d) > 1) {
        dr = d;
        break;
      }
    }
    const int64_t size = x.size(dr);
    const int64_t chunk = std::max<int64_t>(1, kMaxKernelElements / (count / size));
    const int64_t nchunks = (size + chunk - 1) / chunk;
    const DType stage_dtype = op == ReduceOp::any || op == ReduceOp::all
                                  ? DType::boolean
                                  : (is_floating(x.dtype()) ? DType::f64 : DType::i64);
    Shape mid_shape = out.sizes();
    mid_shape[static_cast<size_t>(dr)] = nchunks;
    Tensor mid = empty(mid_shape, {stage_dtype, x.device()});
    const ReduceOp first = op == ReduceOp::mean ? ReduceOp::sum : op;
    const ReduceOp second =
        (op == ReduceOp::sum_squares || op == ReduceOp::mean) ? ReduceOp::sum : op;
    for (int64_t i = 0; i < nchunks; ++i) {
      const int64_t start = i * chunk, len = std::min(chunk, size - start);
      Shape xs = x.sizes(), ms = mid_shape;
      xs[static_cast<size_t>(dr)] = len;
      ms[static_cast<size_t>(dr)] = 1;
      reduce(first, x.as_strided_raw(xs, x.strides(), x.offset() + start * x.stride(dr)),
             mid.as_strided_raw(ms, mid.strides(), mid.offset() + i * mid.stride(dr)), dims);
    }
    if (op == ReduceOp::mean) {
      Tensor tmp = temp_like(out, DType::f64);
      reduce(ReduceOp::sum, mid, tmp, dims);
      unary(UnaryOp::affine, tmp, tmp, 1.0 / static_cast<double>(count), 0.0);
      copy(tmp, out);
    } else {
      reduce(second, mid, out, dims);
    }
    return;
  }

  ReduceProblem p;
  p.outputs = outputs;
  p.count = count;
  p.in_dtype = x.dtype();
  p.out_dtype = out.dtype();
  p.in = x.raw_data();
  p.out = out.raw_data();
  p.kept.ndim = static_cast<int>(kept.size());
  p.kept.numel = outputs;
  for (size_t d = 0; d < kept.size(); ++d) {
    p.kept.sizes[d] = kept[d].size;
    p.kept.strides[0][d] = kept[d].os;
    p.kept.strides[1][d] = kept[d].xs;
  }
  p.reduced.ndim = static_cast<int>(red.size());
  p.reduced.numel = count;
  for (size_t d = 0; d < red.size(); ++d) {
    p.reduced.sizes[d] = red[d].size;
    p.reduced.strides[0][d] = red[d].xs;
  }
  const int sms = device_state(device).props.multiProcessorCount;
  const size_t ws_bytes = reduce_workspace_bytes(op, p, sms);
  if (ws_bytes == 0) {
    launch_reduce(op, p, nullptr, sms, stream);
  } else {
    Workspace ws(ws_bytes, device, "reduce");
    launch_reduce(op, p, ws.data(), sms, stream);
  }
}

}  // namespace gradus::backend::cuda
