// Layer norm over the columns of [rows, cols] and batch norm over (N, S) of [N, C, S], forward and
// backward, the device twins of src/backend/cpu/norm.cpp: two-pass statistics with sums in
// double, per-element math in float (double for f64). Weight, bias and statistics dtypes are
// read at run time (mixed precision keeps them in float32 while x is bf16 / f16).
#include "backend/cuda/common.cuh"

namespace gradus::backend::cuda {
namespace {

constexpr int kBlock = 256;
constexpr int64_t kWarpCols = 1024;

template <typename C>
__device__ __forceinline__ C opt_load(const void* p, DType t, int64_t i, C fallback) {
  return p == nullptr ? fallback : load_dyn<C>(static_cast<const char*>(p) + i * dtype_bytes(t), t);
}
template <typename C>
__device__ __forceinline__ void opt_store(void* p, DType t, int64_t i, C v) {
  if (p != nullptr) store_dyn(static_cast<char*>(p) + i * dtype_bytes(t), t, v);
}

// ------------------------------------------------------------------------------- layer norm
template <typename T>
__global__ void __launch_bounds__(kBlock)
    layer_norm_kernel(NormArgs a, int64_t rows, int64_t cols) {
  using C = compute_t<T>;
  __shared__ double sh[32];
  const bool warp = cols <= kWarpCols;
  const int64_t row =
      warp ? static_cast<int64_t>(blockIdx.x) * (kBlock / 32) + (threadIdx.x >> 5) : blockIdx.x;
  if (row >= rows) return;  // uniform per warp (warp rows) or block
  const int first = warp ? (threadIdx.x & 31) : threadIdx.x;
  const int step = warp ? 32 : blockDim.x;
  const T* xr = static_cast<const T*>(a.x) + row * cols;
  double m = 0;  // RMS normalisation (no mean): about 0
  if (a.mean != nullptr) {
    double s = 0;
    for (int64_t c = first; c < cols; c += step) s += static_cast<double>(load(xr + c));
    m = row_sum(s, warp, sh) / static_cast<double>(cols);
  }
  double q = 0;
  for (int64_t c = first; c < cols; c += step) {
    const double d = static_cast<double>(load(xr + c)) - m;
    q += d * d;
  }
  const double var = row_sum(q, warp, sh) / static_cast<double>(cols);
  const C mt = static_cast<C>(m), rs = static_cast<C>(1.0 / sqrt(var + a.eps));
  if (first == 0) {
    opt_store(a.mean, a.stat_dtype, row, mt);
    opt_store(a.rstd, a.stat_dtype, row, rs);
  }
  T* yr = static_cast<T*>(a.out) + row * cols;
  for (int64_t c = first; c < cols; c += step) {
    C v = (load(xr + c) - mt) * rs;
    if (a.weight != nullptr) v = v * opt_load<C>(a.weight, a.weight_dtype, c, C(1));
    if (a.bias != nullptr) v = v + opt_load<C>(a.bias, a.bias_dtype, c, C(0));
    yr[c] = convert<T>(v);
  }
}

// gx = rstd * (g w - mean(g w) - xhat * mean(g w xhat)); without a mean (RMS), no mean(g w).
template <typename T>
__global__ void __launch_bounds__(kBlock)
    layer_norm_backward_dx(NormArgs a, const T* g, T* gx, int64_t rows, int64_t cols) {
  using C = compute_t<T>;
  __shared__ double sh[32];
  const bool warp = cols <= kWarpCols;
  const int64_t row =
      warp ? static_cast<int64_t>(blockIdx.x) * (kBlock / 32) + (threadIdx.x >> 5) : blockIdx.x;
  if (row >= rows) return;
  const int first = warp ? (threadIdx.x & 31) : threadIdx.x;
  const int step = warp ? 32 : blockDim.x;
  const T* xr = static_cast<const T*>(a.x) + row * cols;
  const T* gr = g + row * cols;
  const C m = opt_load<C>(a.mean, a.stat_dtype, row, C(0));
  const C rs = opt_load<C>(a.rstd, a.stat_dtype, row, C(1));
  double sa = 0, sb = 0;
  for (int64_t c = first; c < cols; c += step) {
    const C gw = load(gr + c) * opt_load<C>(a.weight, a.weight_dtype, c, C(1));
    sa += static_cast<double>(gw);
    sb += static_cast<double>(gw * (load(xr + c) - m) * rs);
  }
  sa = row_sum(sa, warp, sh);
  sb = row_sum(sb, warp, sh);
  // (RMS normalisation has no mean to differentiate through.)
  const C ma = a.mean != nullptr ? static_cast<C>(sa / static_cast<double>(cols)) : C(0);
  const C mb = static_cast<C>(sb / static_cast<double>(cols));
  T* out = gx + row * cols;
  for (int64_t c = first; c < cols; c += step) {
    const C gw = load(gr + c) * opt_load<C>(a.weight, a.weight_dtype, c, C(1));
    out[c] = convert<T>(rs * (gw - ma - (load(xr + c) - m) * rs * mb));
  }
}

// Column sums gw[c] = sum_r g xhat, gb[c] = sum_r g over a split of the rows; 32 columns x 8 row
// lanes per block. Partial (double) sums go to ws[split][c][2] when split, else straight out.
constexpr int kColX = 32, kColY = 8;

template <typename T>
__global__ void __launch_bounds__(kColX* kColY)
    layer_norm_backward_dw(NormArgs a, const T* g, int64_t rows, int64_t cols, int splits,
                           double* ws, void* gw, void* gb, DType pdt) {
  using C = compute_t<T>;
  __shared__ double sw[kColY][kColX], sb[kColY][kColX];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColX + threadIdx.x;
  const int64_t chunk = (rows + splits - 1) / splits;
  const int64_t r0 = blockIdx.y * chunk, r1 = min(rows, r0 + chunk);
  double acc_w = 0, acc_b = 0;
  if (c < cols) {
    const T* x = static_cast<const T*>(a.x);
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColY) {
      const C m = opt_load<C>(a.mean, a.stat_dtype, r, C(0));
      const C rs = opt_load<C>(a.rstd, a.stat_dtype, r, C(1));
      const C gv = load(g + r * cols + c);
      acc_w += static_cast<double>(gv * ((load(x + r * cols + c) - m) * rs));
      acc_b += static_cast<double>(gv);
    }
  }
  sw[threadIdx.y][threadIdx.x] = acc_w;
  sb[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int y = 1; y < kColY; ++y) {
    acc_w += sw[y][threadIdx.x];
    acc_b += sb[y][threadIdx.x];
  }
  if (splits == 1) {
    opt_store(gw, pdt, c, acc_w);
    opt_store(gb, pdt, c, acc_b);
  } else {
    ws[(blockIdx.y * cols + c) * 2] = acc_w;
    ws[(blockIdx.y * cols + c) * 2 + 1] = acc_b;
  }
}

__global__ void __launch_bounds__(kThreads)
    layer_norm_backward_dw_finish(const double* ws, int64_t cols, int splits, void* gw, void* gb,
                                  DType pdt) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double w = 0, b = 0;
  for (int s = 0; s < splits; ++s) {
    w += ws[(s * cols + c) * 2];
    b += ws[(s * cols + c) * 2 + 1];
  }
  opt_store(gw, pdt, c, w);
  opt_store(gb, pdt, c, b);
}

int ln_splits(int64_t rows, int64_t cols) {
  const int64_t col_blocks = (cols + kColX - 1) / kColX;
  int64_t splits = (528 + col_blocks - 1) / col_blocks;  // ~4 blocks per SM on an H100/H200
  splits = std::min<int64_t>(splits, (rows + 63) / 64);  // at least 64 rows per split
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(splits, 65535)));
}

// ------------------------------------------------------------------------------- batch norm
// Per-channel statistics (one block per channel, flat index over N * S in 32-bit math).
// ws[c] = {scale, shift} for the forward apply.
template <typename T>
__global__ void __launch_bounds__(kBlock)
    batch_norm_stats(NormArgs a, void* rm, void* rv, DType rdt, double momentum, uint32_t n,
                     uint32_t channels, uint32_t s, double* ws) {
  __shared__ double sh[32];
  const uint32_t c = blockIdx.x;
  const T* x = static_cast<const T*>(a.x);
  const uint32_t count = n * s;
  auto at = [&](uint32_t i) {
    const uint32_t ni = i / s, si = i - ni * s;
    return static_cast<double>(load(x + (static_cast<int64_t>(ni) * channels + c) * s + si));
  };
  double sum = 0;
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) sum += at(i);
  const double m = block_sum(sum, sh) / static_cast<double>(count);
  double sq = 0;
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const double d = at(i) - m;
    sq += d * d;
  }
  sq = block_sum(sq, sh);
  if (threadIdx.x != 0) return;
  const double var = sq / static_cast<double>(count);
  const double rstd = 1.0 / sqrt(var + a.eps);
  opt_store(a.mean, a.stat_dtype, c, m);
  opt_store(a.rstd, a.stat_dtype, c, rstd);
  if (rm != nullptr) {
    opt_store(rm, rdt, c, (1.0 - momentum) * opt_load<double>(rm, rdt, c, 0.0) + momentum * m);
  }
  if (rv != nullptr) {
    const double unbiased = sq / static_cast<double>(count - 1);
    opt_store(rv, rdt, c,
              (1.0 - momentum) * opt_load<double>(rv, rdt, c, 0.0) + momentum * unbiased);
  }
  const double scale = rstd * opt_load<double>(a.weight, a.weight_dtype, c, 1.0);
  ws[2 * c] = scale;
  ws[2 * c + 1] = opt_load<double>(a.bias, a.bias_dtype, c, 0.0) - m * scale;
}

// Eval mode: scale / shift from the running statistics.
__global__ void __launch_bounds__(kThreads)
    batch_norm_eval_coeffs(NormArgs a, const void* rm, const void* rv, DType rdt, uint32_t channels,
                           double* ws) {
  const uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const double m = opt_load<double>(rm, rdt, c, 0.0);
  const double rstd = 1.0 / sqrt(opt_load<double>(rv, rdt, c, 1.0) + a.eps);
  const double scale = rstd * opt_load<double>(a.weight, a.weight_dtype, c, 1.0);
  ws[2 * c] = scale;
  ws[2 * c + 1] = opt_load<double>(a.bias, a.bias_dtype, c, 0.0) - m * scale;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    batch_norm_apply(const T* x, T* y, const double* ws, uint32_t channels, uint32_t s,
                     int64_t total) {
  using C = compute_t<T>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const uint32_t c = static_cast<uint32_t>((i / s) % channels);
  y[i] = convert<T>(load(x + i) * static_cast<C>(ws[2 * c]) + static_cast<C>(ws[2 * c + 1]));
}

// Backward statistics per channel: sg = sum g, sgx = sum g (x - mean). Writes the parameter
// gradients and the coefficients of gx = a g - b - cx (x - mean) to ws[c][4] = {a, b, cx, mean}.
template <typename T>
__global__ void __launch_bounds__(kBlock)
    batch_norm_backward_stats(NormArgs a, const T* g, void* gw, void* gb, DType pdt, uint32_t n,
                              uint32_t channels, uint32_t s, double* ws) {
  using C = compute_t<T>;
  __shared__ double sh[32];
  const uint32_t c = blockIdx.x;
  const T* x = static_cast<const T*>(a.x);
  const uint32_t count = n * s;
  const C m = opt_load<C>(a.mean, a.stat_dtype, c, C(0));
  const C rs = opt_load<C>(a.rstd, a.stat_dtype, c, C(1));
  double sg = 0, sgx = 0;
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const uint32_t ni = i / s, si = i - ni * s;
    const int64_t off = (static_cast<int64_t>(ni) * channels + c) * s + si;
    const C gv = load(g + off);
    sg += static_cast<double>(gv);
    sgx += static_cast<double>(gv * (load(x + off) - m));
  }
  sg = block_sum(sg, sh);
  sgx = block_sum(sgx, sh) * static_cast<double>(rs);
  if (threadIdx.x != 0) return;
  opt_store(gw, pdt, c, sgx);
  opt_store(gb, pdt, c, sg);
  const double k = opt_load<double>(a.weight, a.weight_dtype, c, 1.0) * static_cast<double>(rs);
  ws[4 * c] = k;
  ws[4 * c + 1] = k * sg / static_cast<double>(count);
  ws[4 * c + 2] = k * sgx / static_cast<double>(count) * static_cast<double>(rs);
  ws[4 * c + 3] = static_cast<double>(m);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    batch_norm_backward_apply(const T* g, const T* x, T* gx, const double* ws, uint32_t channels,
                              uint32_t s, int64_t total) {
  using C = compute_t<T>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const uint32_t c = static_cast<uint32_t>((i / s) % channels);
  const C k = static_cast<C>(ws[4 * c]), b = static_cast<C>(ws[4 * c + 1]);
  const C cx = static_cast<C>(ws[4 * c + 2]), m = static_cast<C>(ws[4 * c + 3]);
  gx[i] = convert<T>(k * load(g + i) - b - cx * (load(x + i) - m));
}

unsigned int rows_grid(int64_t rows, int64_t cols) {
  return cols <= kWarpCols ? blocks_for(rows, kBlock / 32) : blocks_for(rows, 1);
}

}  // namespace

void launch_layer_norm(const NormArgs& a, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  dispatch_float(a.dtype, "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    layer_norm_kernel<T><<<rows_grid(rows, cols), kBlock, 0, stream>>>(a, rows, cols);
  });
  GRADUS_CUDA_CHECK_LAUNCH("layer_norm");
}

size_t layer_norm_backward_workspace_bytes(int64_t rows, int64_t cols) {
  const int splits = ln_splits(rows, cols);
  return splits > 1 ? static_cast<size_t>(splits) * static_cast<size_t>(cols) * 2 * sizeof(double)
                    : 0;
}

void launch_layer_norm_backward(const NormArgs& a, const void* grad_out, void* grad_x,
                                void* grad_weight, void* grad_bias, DType pdt, int64_t rows,
                                int64_t cols, void* workspace, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  dispatch_float(a.dtype, "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(grad_out);
    if (grad_x != nullptr) {
      layer_norm_backward_dx<T>
          <<<rows_grid(rows, cols), kBlock, 0, stream>>>(a, g, static_cast<T*>(grad_x), rows, cols);
    }
    if (grad_weight != nullptr || grad_bias != nullptr) {
      const int splits = ln_splits(rows, cols);
      const dim3 grid(blocks_for(cols, kColX), static_cast<unsigned>(splits));
      layer_norm_backward_dw<T><<<grid, dim3(kColX, kColY), 0, stream>>>(
          a, g, rows, cols, splits, static_cast<double*>(workspace), grad_weight, grad_bias, pdt);
      if (splits > 1) {
        layer_norm_backward_dw_finish<<<blocks_for(cols, kThreads), kThreads, 0, stream>>>(
            static_cast<const double*>(workspace), cols, splits, grad_weight, grad_bias, pdt);
      }
    }
  });
  GRADUS_CUDA_CHECK_LAUNCH("layer_norm_backward");
}

size_t batch_norm_workspace_bytes(int64_t c) {
  return static_cast<size_t>(c) * 4 * sizeof(double);
}

void launch_batch_norm(const NormArgs& a, void* rm, void* rv, DType rdt, bool training,
                       double momentum, int64_t n, int64_t c, int64_t s, void* workspace,
                       cudaStream_t stream) {
  if (c == 0) return;
  auto* ws = static_cast<double*>(workspace);
  const int64_t total = n * c * s;
  dispatch_float(a.dtype, "batch_norm", [&](auto tag) {
    using T = decltype(tag);
    if (training) {
      if (total == 0) return;
      batch_norm_stats<T><<<static_cast<unsigned>(c), kBlock, 0, stream>>>(
          a, rm, rv, rdt, momentum, static_cast<uint32_t>(n), static_cast<uint32_t>(c),
          static_cast<uint32_t>(s), ws);
    } else {
      batch_norm_eval_coeffs<<<blocks_for(c, kThreads), kThreads, 0, stream>>>(
          a, rm, rv, rdt, static_cast<uint32_t>(c), ws);
    }
    if (total == 0) return;
    batch_norm_apply<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(a.x), static_cast<T*>(a.out), ws, static_cast<uint32_t>(c),
        static_cast<uint32_t>(s), total);
  });
  GRADUS_CUDA_CHECK_LAUNCH("batch_norm");
}

void launch_batch_norm_backward(const NormArgs& a, const void* grad_out, void* grad_x,
                                void* grad_weight, void* grad_bias, DType pdt, int64_t n, int64_t c,
                                int64_t s, void* workspace, cudaStream_t stream) {
  if (c == 0) return;
  auto* ws = static_cast<double*>(workspace);
  const int64_t total = n * c * s;
  dispatch_float(a.dtype, "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(grad_out);
    batch_norm_backward_stats<T><<<static_cast<unsigned>(c), kBlock, 0, stream>>>(
        a, g, grad_weight, grad_bias, pdt, static_cast<uint32_t>(n), static_cast<uint32_t>(c),
        static_cast<uint32_t>(s), ws);
    if (grad_x != nullptr && total > 0) {
      batch_norm_backward_apply<T><<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
          g, static_cast<const T*>(a.x), static_cast<T*>(grad_x), ws, static_cast<uint32_t>(c),
          static_cast<uint32_t>(s), total);
    }
  });
  GRADUS_CUDA_CHECK_LAUNCH("batch_norm_backward");
}

}  // namespace gradus::backend::cuda
