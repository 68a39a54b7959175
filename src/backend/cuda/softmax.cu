// Row-wise kernels over contiguous [rows, cols]: softmax / log-softmax and their backward, fused
// cross-entropy forward / backward. A row is handled by one warp (cols <= 1024, eight rows per
// block) or by one block of 256 threads; statistics use an online (max, sum of exp) pair so the
// row is read once for them. Math in float (double for f64), like the CPU backend.
#include "backend/cuda/common.cuh"

namespace gradus::backend::cuda {
namespace {

constexpr int kRowBlock = 256;
constexpr int64_t kWarpCols = 1024;

// Running (max, sum of exp(x - max)). An empty state is (-inf, 0).
template <typename C>
struct MaxSum {
  C m, s;
};

template <typename C>
__device__ __forceinline__ void ms_add(MaxSum<C>& a, C x) {
  if (x > a.m) {
    a.s = a.s * m_exp(a.m - x) + C(1);
    a.m = x;
  } else {
    a.s += m_exp(x - a.m);  // also NaN for x = m = -inf, like the CPU
  }
}

template <typename C>
__device__ __forceinline__ MaxSum<C> ms_merge(MaxSum<C> a, MaxSum<C> b) {
  if (b.s == C(0) && b.m == -INFINITY) return a;
  if (a.s == C(0) && a.m == -INFINITY) return b;
  const C m = a.m > b.m ? a.m : b.m;
  return {m, a.s * m_exp(a.m - m) + b.s * m_exp(b.m - m)};
}

// Row context: which row this warp / block owns, and how its threads stride over the columns.
struct RowCtx {
  int64_t row;
  int first, step;
  bool warp;
};

__device__ __forceinline__ bool row_ctx(int64_t rows, int64_t cols, RowCtx& r) {
  r.warp = cols <= kWarpCols;
  if (r.warp) {
    r.row = static_cast<int64_t>(blockIdx.x) * (kRowBlock / 32) + (threadIdx.x >> 5);
    r.first = threadIdx.x & 31;
    r.step = 32;
  } else {
    r.row = blockIdx.x;
    r.first = threadIdx.x;
    r.step = blockDim.x;
  }
  return r.row < rows;
}

unsigned int row_blocks(int64_t rows, int64_t cols) {
  return cols <= kWarpCols ? blocks_for(rows, kRowBlock / 32) : blocks_for(rows, 1);
}

// Reductions across the row's threads (warp or block). `shared` holds 32 values; every thread
// must call these (no early exit) in block mode.
template <typename C>
__device__ __forceinline__ MaxSum<C> row_merge(MaxSum<C> v, bool warp, MaxSum<C>* shared) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum<C> other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = ms_merge(v, other);
  }
  if (warp) return v;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared[w] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? shared[lane] : MaxSum<C>{-INFINITY, C(0)};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum<C> other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = ms_merge(v, other);
  }
  return v;
}

// ------------------------------------------------------------------------------- softmax
template <typename T>
__global__ void __launch_bounds__(kRowBlock)
    softmax_kernel(const T* x, T* y, int64_t rows, int64_t cols, bool log) {
  using C = compute_t<T>;
  __shared__ MaxSum<C> sh[32];
  RowCtx r;
  const bool valid = row_ctx(rows, cols, r);
  if (r.warp && !valid) return;
  const int64_t row = valid ? r.row : 0;
  const T* xr = x + row * cols;
  MaxSum<C> st{-INFINITY, C(0)};
  if (valid) {
    for (int64_t c = r.first; c < cols; c += r.step) ms_add(st, load(xr + c));
  }
  st = row_merge(st, r.warp, sh);
  if (!valid) return;
  T* yr = y + row * cols;
  if (log) {
    // (x - max) - log(sum), not x - (max + log(sum)): the latter rounds the sum to the precision
    // of max first and loses the low bits of log(sum) at large logits (same as the CPU backend).
    const C log_sum = m_log(st.s);
    for (int64_t c = r.first; c < cols; c += r.step) {
      yr[c] = convert<T>((load(xr + c) - st.m) - log_sum);
    }
  } else {
    const C inv = C(1) / st.s;
    for (int64_t c = r.first; c < cols; c += r.step) {
      yr[c] = convert<T>(m_exp(load(xr + c) - st.m) * inv);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowBlock)
    softmax_backward_kernel(const T* g, const T* y, T* gx, int64_t rows, int64_t cols, bool log) {
  using C = compute_t<T>;
  __shared__ C sh[32];
  RowCtx r;
  const bool valid = row_ctx(rows, cols, r);
  if (r.warp && !valid) return;
  const int64_t row = valid ? r.row : 0;
  const T* gr = g + row * cols;
  const T* yr = y + row * cols;
  C s = 0;
  if (valid) {
    for (int64_t c = r.first; c < cols; c += r.step) {
      s += log ? load(gr + c) : load(gr + c) * load(yr + c);
    }
  }
  s = row_sum(s, r.warp, sh);
  if (!valid) return;
  T* out = gx + row * cols;
  for (int64_t c = r.first; c < cols; c += r.step) {
    const C gv = load(gr + c), yv = load(yr + c);
    out[c] = convert<T>(log ? gv - m_exp(yv) * s : yv * (gv - s));
  }
}

// ------------------------------------------------------------------------------- cross entropy
__device__ __forceinline__ int64_t target_at(const CrossEntropyArgs& a, int64_t i) {
  return load_dyn<int64_t>(
      static_cast<const char*>(a.target) + i * a.target_stride * dtype_bytes(a.target_dtype),
      a.target_dtype);
}

template <typename C>
__device__ __forceinline__ C weight_at(const CrossEntropyArgs& a, int64_t c) {
  return a.weight == nullptr
             ? C(1)
             : load_dyn<C>(static_cast<const char*>(a.weight) + c * dtype_bytes(a.weight_dtype),
                           a.weight_dtype);
}

template <typename T>
__global__ void __launch_bounds__(kRowBlock)
    cross_entropy_kernel(CrossEntropyArgs a, void* loss, void* lse, DType loss_dtype) {
  using C = compute_t<T>;
  __shared__ MaxSum<C> sh[32];
  __shared__ C shs[32];
  RowCtx r;
  const bool valid = row_ctx(a.n, a.c, r);
  if (r.warp && !valid) return;
  const int64_t row = valid ? r.row : 0;
  const T* xr = static_cast<const T*>(a.logits) + row * a.c;
  MaxSum<C> st{-INFINITY, C(0)};
  if (valid) {
    for (int64_t c = r.first; c < a.c; c += r.step) ms_add(st, load(xr + c));
  }
  st = row_merge(st, r.warp, sh);
  // lse: +-inf when the max is infinite (CPU: all -inf or a +inf logit), else max + log(sum).
  const C l = isinf(st.m) ? st.m : st.m + m_log(st.s);
  const int64_t t = valid ? target_at(a, row) : 0;
  const C ls = static_cast<C>(a.label_smoothing);
  C smooth = 0;
  if (ls != C(0) && t != a.ignore_index && t >= 0 && t < a.c) {  // uniform across the row
    if (valid) {
      for (int64_t c = r.first; c < a.c; c += r.step)
        smooth += weight_at<C>(a, c) * (load(xr + c) - l);
    }
    smooth = row_sum(smooth, r.warp, shs);
  }
  if (!valid || r.first != 0) return;
  const int64_t esize = dtype_bytes(loss_dtype);
  store_dyn(static_cast<char*>(lse) + row * esize, loss_dtype, l);
  C v;
  if (t == a.ignore_index) {
    v = 0;
  } else if (t < 0 || t >= a.c) {
    v = NAN;
  } else {
    v = -(C(1) - ls) * weight_at<C>(a, t) * (load(xr + t) - l);
    if (ls != C(0)) v -= ls / static_cast<C>(a.c) * smooth;
  }
  store_dyn(static_cast<char*>(loss) + row * esize, loss_dtype, v);
}

template <typename T>
__global__ void __launch_bounds__(kRowBlock)
    cross_entropy_backward_kernel(CrossEntropyArgs a, const void* grad_loss, int64_t grad_stride,
                                  const void* lse, DType loss_dtype, T* gx) {
  using C = compute_t<T>;
  RowCtx r;
  if (!row_ctx(a.n, a.c, r)) return;
  const int64_t row = r.row;
  const T* xr = static_cast<const T*>(a.logits) + row * a.c;
  T* out = gx + row * a.c;
  const int64_t t = target_at(a, row);
  if (t == a.ignore_index || t < 0 || t >= a.c) {
    const T fillv = convert<T>(t == a.ignore_index ? C(0) : C(NAN));
    for (int64_t c = r.first; c < a.c; c += r.step) out[c] = fillv;
    return;
  }
  const int64_t esize = dtype_bytes(loss_dtype);
  const C gi =
      load_dyn<C>(static_cast<const char*>(grad_loss) + row * grad_stride * esize, loss_dtype);
  const C l = load_dyn<C>(static_cast<const char*>(lse) + row * esize, loss_dtype);
  const C ls = static_cast<C>(a.label_smoothing);
  const C wt = weight_at<C>(a, t) * (C(1) - ls);
  const C smooth = ls / static_cast<C>(a.c);
  const C wsum = a.weight_sum != nullptr ? static_cast<C>(*a.weight_sum) : static_cast<C>(a.c);
  const C pscale = gi * (wt + smooth * wsum);
  const C off = gi * smooth;
  for (int64_t c = r.first; c < a.c; c += r.step) {
    C v = pscale * m_exp(load(xr + c) - l) -
          (a.weight != nullptr && smooth != C(0) ? off * weight_at<C>(a, c) : off);
    if (c == t) v -= gi * wt;
    out[c] = convert<T>(v);
  }
}

}  // namespace

void launch_softmax(const void* x, void* out, DType dtype, int64_t rows, int64_t cols, bool log,
                    cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  dispatch_float(dtype, "softmax", [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T><<<row_blocks(rows, cols), kRowBlock, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(out), rows, cols, log);
  });
  GRADUS_CUDA_CHECK_LAUNCH("softmax");
}

void launch_softmax_backward(const void* grad_out, const void* y, void* grad_in, DType dtype,
                             int64_t rows, int64_t cols, bool log, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  dispatch_float(dtype, "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<row_blocks(rows, cols), kRowBlock, 0, stream>>>(
        static_cast<const T*>(grad_out), static_cast<const T*>(y), static_cast<T*>(grad_in), rows,
        cols, log);
  });
  GRADUS_CUDA_CHECK_LAUNCH("softmax_backward");
}

void launch_cross_entropy(const CrossEntropyArgs& a, void* loss, void* lse, DType loss_dtype,
                          cudaStream_t stream) {
  if (a.n == 0) return;
  dispatch_float(a.dtype, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_kernel<T>
        <<<row_blocks(a.n, a.c), kRowBlock, 0, stream>>>(a, loss, lse, loss_dtype);
  });
  GRADUS_CUDA_CHECK_LAUNCH("cross_entropy");
}

void launch_cross_entropy_backward(const CrossEntropyArgs& a, const void* grad_loss,
                                   int64_t grad_stride, const void* lse, DType loss_dtype,
                                   void* grad_logits, cudaStream_t stream) {
  if (a.n == 0 || a.c == 0) return;
  dispatch_float(a.dtype, "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_kernel<T><<<row_blocks(a.n, a.c), kRowBlock, 0, stream>>>(
        a, grad_loss, grad_stride, lse, loss_dtype, static_cast<T*>(grad_logits));
  });
  GRADUS_CUDA_CHECK_LAUNCH("cross_entropy_backward");
}

}  // namespace gradus::backend::cuda
