// Host side of the indexing, random and optimizer kernels.
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/iter.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/staging.h"
#include "gradus/core/determinism.h"

namespace gradus::backend::cuda {
namespace {

// A view of t with the index's shape and t's strides, the stride along `dim` zeroed (the kernel
// adds index * stride(dim) itself).
Tensor indexed_view(const Tensor& t, const Tensor& index, int64_t dim) {
  Shape strides = t.strides();
  strides[static_cast<size_t>(dim)] = 0;
  return t.as_strided_raw(index.sizes(), strides, t.offset());
}

}  // namespace

// ------------------------------------------------------------------------------- indexing
void CudaBackend::index_select_rows(const Tensor& table, const Tensor& index, const Tensor& out) {
  const int64_t n = index.numel();
  if (n == 0 || out.numel() == 0) return;
  DeviceGuard guard(out);
  const Tensor tc = contiguous_as(*this, table, out.dtype());
  const Tensor ic = contiguous_as(*this, index, DType::i64);
  // The product of the trailing sizes, not numel / rows: a [0, D] table has no rows to divide by.
  int64_t row_elems = 1;
  for (int64_t d = 1; d < tc.dim(); ++d) row_elems *= tc.size(d);
  const int64_t row_bytes = row_elems * static_cast<int64_t>(tc.element_size());
  into_contiguous(*this, out, [&](const Tensor& o) {
    launch_index_select_rows(tc.raw_data(), static_cast<const int64_t*>(ic.raw_data()),
                             o.raw_data(), n, row_bytes, tc.dim() > 0 ? tc.size(0) : 1,
                             stream_of(out.device().index()));
  });
}

void CudaBackend::index_add_rows(const Tensor& grad_out, const Tensor& index,
                                 const Tensor& grad_table) {
  const int64_t n = index.numel();
  if (n == 0 || grad_table.numel() == 0) return;
  DeviceGuard guard(grad_table);
  const int64_t width = grad_table.dim() > 1 ? grad_table.numel() / grad_table.size(0) : 1;
  const int64_t rows = grad_table.dim() > 0 ? grad_table.size(0) : 1;
  const DType dt = grad_table.dtype();
  const bool ordered = is_deterministic();
  cudaStream_t stream = stream_of(grad_table.device().index());
  GRADUS_CHECK(grad_table.is_contiguous(), ValueError,
               "index_add_rows: cuda expects a contiguous gradient table");
  const Tensor ic = contiguous_as(*this, index, DType::i64);
  const auto* idx = static_cast<const int64_t*>(ic.raw_data());
  if (ordered && (dt == DType::f16 || dt == DType::bf16)) {
    // Deterministic mode sums 16-bit floats in float32 and rounds once, as the CPU does, so the
    // two give the same bits.
    Tensor acc = empty(grad_table.sizes(), {DType::f32, grad_table.device()});
    copy(grad_table, acc);
    const Tensor gc = contiguous_as(*this, grad_out, DType::f32);
    launch_index_add_rows(gc.raw_data(), idx, acc.raw_data(), DType::f32, n, width, rows, true,
                          stream);
    copy(acc, grad_table);
    return;
  }
  const Tensor gc = contiguous_as(*this, grad_out, dt);
  launch_index_add_rows(gc.raw_data(), idx, grad_table.raw_data(), dt, n, width, rows, ordered,
                        stream);
}

void CudaBackend::gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  const Tensor ic = contiguous_as(*this, index, DType::i64);
  const Tensor xs = x.dtype() == out.dtype() ? x : contiguous_as(*this, x, out.dtype());
  const Tensor xv = indexed_view(xs, ic, dim);
  const int64_t dim_stride = xs.stride(dim), dim_size = xs.size(dim);
  cudaStream_t stream = stream_of(out.device().index());
  for_each_piece<3>(make_layout<3>(ic.sizes(), {&out, &ic, &xv}),
                    [&](const Iter<3>& it) { launch_gather(it, dim_stride, dim_size, stream); });
}

void CudaBackend::scatter_add(const Tensor& out, int64_t dim, const Tensor& index,
                              const Tensor& src) {
  if (index.numel() == 0) return;
  // Integer sums are exact in any order; floating ones would depend on the atomics' order.
  if (is_floating(out.dtype())) check_deterministic_allowed("scatter_add (CUDA)");
  DeviceGuard guard(out);
  const Tensor ic = contiguous_as(*this, index, DType::i64);
  const Tensor sc = src.dtype() == out.dtype() ? src : contiguous_as(*this, src, out.dtype());
  const Tensor ov = indexed_view(out, ic, dim);
  const Tensor sv = sc.as_strided_raw(ic.sizes(), sc.strides(), sc.offset());
  const int64_t dim_stride = out.stride(dim), dim_size = out.size(dim);
  cudaStream_t stream = stream_of(out.device().index());
  for_each_piece<3>(make_layout<3>(ic.sizes(), {&ov, &ic, &sv}), [&](const Iter<3>& it) {
    launch_scatter_add(it, dim_stride, dim_size, stream);
  });
}

// ------------------------------------------------------------------------------- random
namespace {
// The random stream's position is a kernel argument from the host's generator: a graph would
// replay the numbers drawn at capture every time.
void refuse_random_in_capture(const char* op) {
  refuse_in_capture(op,
                    " (it draws new random numbers at each call; a replay would repeat those "
                    "drawn at capture)");
}
}  // namespace

void CudaBackend::uniform(const Tensor& out, PhiloxState state, double lo, double hi) {
  refuse_random_in_capture("a uniform random fill");
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  into_contiguous(*this, out, [&](const Tensor& o) {
    launch_uniform(o.raw_data(), o.dtype(), o.numel(), 0, state, lo, hi,
                   stream_of(out.device().index()));
  });
}

void CudaBackend::normal(const Tensor& out, PhiloxState state, double mean, double std) {
  refuse_random_in_capture("a normal random fill");
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  into_contiguous(*this, out, [&](const Tensor& o) {
    launch_normal(o.raw_data(), o.dtype(), o.numel(), 0, state, mean, std,
                  stream_of(out.device().index()));
  });
}

void CudaBackend::bernoulli(const Tensor& out, const Tensor& p, PhiloxState state) {
  refuse_random_in_capture("bernoulli");
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  cudaStream_t stream = stream_of(out.device().index());
  into_contiguous(*this, out, [&](const Tensor& o) {
    const char* base = static_cast<const char*>(o.raw_data());
    const int64_t esize = static_cast<int64_t>(o.element_size());
    for_each_piece<2>(make_layout<2>(o.sizes(), {&o, &p}), [&](const Iter<2>& it) {
      const int64_t first = (static_cast<const char*>(it.data[0]) - base) / esize;
      launch_bernoulli(it, first, state, stream);
    });
  });
}

void CudaBackend::dropout(const Tensor& x, double p, PhiloxState state, const Tensor& out,
                          const Tensor& mask) {
  refuse_random_in_capture("dropout");
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  const Tensor xc = contiguous_as(*this, x, out.dtype());
  cudaStream_t stream = stream_of(out.device().index());
  into_contiguous(*this, out, [&](const Tensor& o) {
    into_contiguous(*this, mask, [&](const Tensor& m) {
      launch_dropout(xc.raw_data(), o.raw_data(), m.raw_data(), o.dtype(), m.dtype(), o.numel(), 0,
                     p, state, stream);
    });
  });
}

// ------------------------------------------------------------------------------- optimizers
namespace {

// Packs tensors into launch-sized lists; a new list starts whenever the dtypes change.
// state_dtype(i): the dtype of parameter i's optimizer state (its own dtype when it has none).
template <typename StateDType, typename Fill, typename Launch>
void for_each_list(const char* op, const std::vector<Tensor>& params,
                   const std::vector<Tensor>& grads, const StateDType& state_dtype,
                   const Fill& fill, const Launch& launch) {
  GRADUS_CHECK(grads.size() >= params.size(), ValueError, op, ": ", params.size(),
               " parameters but ", grads.size(), " gradients");
  TensorList l;
  auto flush = [&] {
    if (l.count > 0) launch(l);
    l = TensorList();
  };
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    const Tensor& g = grads[i];
    if (p.numel() == 0) continue;
    GRADUS_CHECK(p.is_contiguous() && g.is_contiguous() && g.numel() == p.numel(), ValueError, op,
                 ": parameter ", i, " and its gradient must be contiguous and of one size, got ",
                 shape_str(p.sizes()), " and ", shape_str(g.sizes()));
    GRADUS_CHECK(is_floating(p.dtype()) && is_floating(g.dtype()), DTypeError, op,
                 ": floating parameters and gradients expected, got ", dtype_name(p.dtype()),
                 " and ", dtype_name(g.dtype()));
    const DType sd = state_dtype(i);
    if (l.count > 0 && (l.count == kMaxTensorsPerLaunch || l.param_dtype != p.dtype() ||
                        l.grad_dtype != g.dtype() || l.state_dtype != sd)) {
      flush();
    }
    const int k = l.count++;
    l.param_dtype = p.dtype();
    l.grad_dtype = g.dtype();
    l.state_dtype = sd;
    l.param[k] = p.raw_data();
    l.grad[k] = g.raw_data();
    l.numel[k] = p.numel();
    fill(l, k, i);
    l.chunk_start[k + 1] =
        l.chunk_start[k] + static_cast<int32_t>((p.numel() + kOptimChunk - 1) / kOptimChunk);
  }
  flush();
}

const Tensor* state_at(const std::vector<Tensor>& v, size_t i) {
  return i < v.size() && v[i].defined() ? &v[i] : nullptr;
}

void* state_ptr(const char* op, const Tensor* s, const Tensor& p, const TensorList& l) {
  if (s == nullptr) return nullptr;
  GRADUS_CHECK(s->is_contiguous() && s->numel() == p.numel() && s->dtype() == l.state_dtype,
               ValueError, op, ": optimizer states must be contiguous, match their parameter ",
               shape_str(p.sizes()), " and share one dtype, got ", shape_str(s->sizes()), " ",
               dtype_name(s->dtype()));
  return s->raw_data();
}

}  // namespace

void CudaBackend::sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& momentum_buffers, const SgdArgs& args) {
  if (params.empty()) return;
  DeviceGuard guard(params.front());
  cudaStream_t stream = stream_of(params.front().device().index());
  const bool use_buf = args.momentum != 0.0;
  for_each_list(
      "sgd_step", params, grads,
      [&](size_t i) {
        const Tensor* b = use_buf ? state_at(momentum_buffers, i) : nullptr;
        return b != nullptr ? b->dtype() : params[i].dtype();
      },
      [&](TensorList& l, int k, size_t i) {
        l.state1[k] =
            use_buf ? state_ptr("sgd_step", state_at(momentum_buffers, i), params[i], l) : nullptr;
      },
      [&](const TensorList& l) { launch_sgd(l, args, stream); });
}

void CudaBackend::adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                            const std::vector<Tensor>& exp_avg,
                            const std::vector<Tensor>& exp_avg_sq,
                            const std::vector<Tensor>& max_exp_avg_sq, const AdamArgs& args) {
  if (params.empty()) return;
  DeviceGuard guard(params.front());
  cudaStream_t stream = stream_of(params.front().device().index());
  const bool ams = args.amsgrad && !max_exp_avg_sq.empty();
  AdamArgs a = args;
  a.amsgrad = ams;
  for_each_list(
      "adam_step", params, grads,
      [&](size_t i) {
        const Tensor* m = state_at(exp_avg, i);
        return m != nullptr ? m->dtype() : params[i].dtype();
      },
      [&](TensorList& l, int k, size_t i) {
        const Tensor* m = state_at(exp_avg, i);
        const Tensor* v = state_at(exp_avg_sq, i);
        GRADUS_CHECK(m != nullptr && v != nullptr, ValueError,
                     "adam_step: missing exp_avg / exp_avg_sq for parameter ", i);
        l.state1[k] = state_ptr("adam_step", m, params[i], l);
        l.state2[k] = state_ptr("adam_step", v, params[i], l);
        l.state3[k] =
            ams ? state_ptr("adam_step", state_at(max_exp_avg_sq, i), params[i], l) : nullptr;
      },
      [&](const TensorList& l) { launch_adam(l, a, stream); });
}

void CudaBackend::unscale_and_check(const std::vector<Tensor>& tensors, double scale,
                                    const Tensor& found_inf) {
  if (tensors.empty()) return;
  GRADUS_CHECK(found_inf.dtype() == DType::f32 && found_inf.numel() == 1 && found_inf.is_cuda(),
               DTypeError, "unscale_and_check: found_inf must be one float32 element on the GPU");
  DeviceGuard guard(found_inf);
  cudaStream_t stream = stream_of(found_inf.device().index());
  float* flag = static_cast<float*>(found_inf.raw_data());
  // The tensors are their own "gradients" in the list (the same walk as the optimizers).
  for_each_list(
      "unscale_and_check", tensors, tensors, [&](size_t i) { return tensors[i].dtype(); },
      [](TensorList&, int, size_t) {},
      [&](const TensorList& l) { launch_unscale(l, scale, flag, stream); });
}

}  // namespace gradus::backend::cuda
