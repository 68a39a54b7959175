// Layer norm (and RMS norm: no mean) over the columns of [rows, cols] and batch norm over (N, S) of
// [N, C, S], with their backwards. Statistics are two-pass (mean, then centred squares); sums run
// in the compute type over short blocks whose sums are added in double, so float32 results do not
// drift with large rows or batches. Half types are computed in float32 copies.
#include <cmath>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/float_args.h"
#include "backend/cpu/loops.h"

namespace gradus::backend::cpu {
namespace {

template <typename T>
const T* ptr(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}
template <typename T>
T* mut_ptr(const Tensor& t) {
  return t.defined() ? t.data_ptr<T>() : nullptr;
}

// Sums run in T (vectorised with independent lanes) over blocks of kSumBlock elements, and the
// blocks' sums are added in double: float32 results do not drift with large rows or batches, at
// the cost of float32 arithmetic (double lanes are half as wide and need a conversion each).
constexpr int64_t kSumBlock = 256;

// Sum of p[0..n).
template <typename T>
double sum_d(const T* p, int64_t n) {
  double s = 0;
  for (int64_t b = 0; b < n; b += kSumBlock) {
    const int64_t e = std::min(n, b + kSumBlock);
    T part = 0;
#pragma omp simd reduction(+ : part)
    for (int64_t i = b; i < e; ++i) part += p[i];
    s += static_cast<double>(part);
  }
  return s;
}

// Sum of (p[i] - m)^2.
template <typename T>
double sq_dev_d(const T* p, int64_t n, double m) {
  const T mt = static_cast<T>(m);
  double s = 0;
  for (int64_t b = 0; b < n; b += kSumBlock) {
    const int64_t e = std::min(n, b + kSumBlock);
    T part = 0;
#pragma omp simd reduction(+ : part)
    for (int64_t i = b; i < e; ++i) part += (p[i] - mt) * (p[i] - mt);
    s += static_cast<double>(part);
  }
  return s;
}

// --------------------------------------------------------------------------------- layer norm
template <typename T>
void layer_norm_fwd(const T* x, const T* w, const T* b, double eps, T* y, T* mean, T* rstd,
                    int64_t rows, int64_t cols) {
  parallel_for(rows, std::max<int64_t>(1, kGrain / cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      // (Without a mean: RMS normalisation, about 0.)
      const double m = mean ? sum_d(xr, cols) / static_cast<double>(cols) : 0.0;
      const double var = sq_dev_d(xr, cols, m) / static_cast<double>(cols);
      const T mt = static_cast<T>(m), rs = static_cast<T>(1.0 / std::sqrt(var + eps));
      if (mean) mean[r] = mt;
      rstd[r] = rs;
      if (w && b) {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mt) * rs * w[c] + b[c];
      } else if (w) {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mt) * rs * w[c];
      } else if (b) {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mt) * rs + b[c];
      } else {
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mt) * rs;
      }
    }
  });
}

// Row r of gx = rstd * (g w - mean(g w) - xhat * mean(g w xhat)), xhat = (x - mean) * rstd.
template <typename T>
void layer_norm_bwd_row(const T* gr, const T* xr, const T* w, T m, T rs, bool centred, T* out,
                        int64_t cols) {
  double a = 0, bsum = 0;
  for (int64_t b = 0; b < cols; b += kSumBlock) {
    T pa = 0, pb = 0;
#pragma omp simd reduction(+ : pa, pb)
    for (int64_t c = b; c < std::min(cols, b + kSumBlock); ++c) {
      const T gw_ = w ? gr[c] * w[c] : gr[c];
      pa += gw_;
      pb += gw_ * (xr[c] - m) * rs;
    }
    a += static_cast<double>(pa);
    bsum += static_cast<double>(pb);
  }
  // (RMS normalisation has no mean to differentiate through.)
  const T ma = centred ? static_cast<T>(a / static_cast<double>(cols)) : T(0);
  const T mb = static_cast<T>(bsum / static_cast<double>(cols));
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) {
    const T gw_ = w ? gr[c] * w[c] : gr[c];
    out[c] = rs * (gw_ - ma - (xr[c] - m) * rs * mb);
  }
}

// gx (above); gw = sum_rows g xhat; gb = sum_rows g.
//
// One pass over g and x: the rows are cut into chunks of at least 64 rows (at most 64 chunks), a
// cut that depends on the shape alone; each task takes whole chunks, writes their rows of gx and
// their column sums, and the chunks' sums are added in chunk order in double, so neither gx nor
// the sums depend on the thread count. Within a chunk the column sums run in T over groups of
// kSumRows rows, each group's added to the chunk's in double. A transformer's norm has few columns
// and many rows: splitting only the columns left one thread doing it all, and a second pass for
// the column sums read g and x again. The partial sums take at most 1/16 of the input's memory.
constexpr int64_t kSumRows = 64;
template <typename T>
void layer_norm_bwd(const T* g, const T* x, const T* w, const T* mean, const T* rstd, T* gx, T* gw,
                    T* gb, int64_t rows, int64_t cols) {
  const int64_t chunk_rows = std::max<int64_t>(64, (rows + 63) / 64);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const int64_t sums = (gw ? cols : 0) + (gb ? cols : 0);  // gw's, then gb's
  std::vector<double> partial(static_cast<size_t>(chunks * sums));
  auto chunk = [&](int64_t k, T* group) {
    double* part = partial.data() + k * sums;
    std::fill(part, part + sums, 0.0);
    const int64_t end = std::min(rows, (k + 1) * chunk_rows);
    for (int64_t r0 = k * chunk_rows; r0 < end; r0 += kSumRows) {
      std::fill(group, group + sums, T(0));
      T* sw = gw ? group : nullptr;
      T* sb = gb ? group + (gw ? cols : 0) : nullptr;
      for (int64_t r = r0; r < std::min(end, r0 + kSumRows); ++r) {
        const T* gr = g + r * cols;
        const T* xr = x + r * cols;
        const T m = mean ? mean[r] : T(0), rs = rstd[r];
        if (gx) layer_norm_bwd_row(gr, xr, w, m, rs, mean != nullptr, gx + r * cols, cols);
        if (sw) {
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c) sw[c] += gr[c] * ((xr[c] - m) * rs);
        }
        if (sb) {
#pragma omp simd
          for (int64_t c = 0; c < cols; ++c) sb[c] += gr[c];
        }
      }
      for (int64_t c = 0; c < sums; ++c) part[c] += static_cast<double>(group[c]);
    }
  };
  parallel_for(chunks, std::max<int64_t>(1, kGrain / (chunk_rows * cols)),
               [&](int64_t k0, int64_t k1) {
                 std::vector<T> group(static_cast<size_t>(sums));
                 for (int64_t k = k0; k < k1; ++k) chunk(k, group.data());
               });
  for (int64_t c = 0; c < cols; ++c) {
    double sw = 0, sb = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      if (gw) sw += partial[static_cast<size_t>(k * sums + c)];
      if (gb) sb += partial[static_cast<size_t>(k * sums + (gw ? cols : 0) + c)];
    }
    if (gw) gw[c] = static_cast<T>(sw);
    if (gb) gb[c] = static_cast<T>(sb);
  }
}

// --------------------------------------------------------------------------------- batch norm
struct BnShape {
  int64_t N, C, S;
};

BnShape bn_shape(const Tensor& x) {
  const int64_t N = x.dim() > 0 ? x.size(0) : 1, C = x.dim() > 1 ? x.size(1) : 1;
  const int64_t S = N * C > 0 ? x.numel() / (N * C) : 0;
  return {N, C, S};
}

template <typename T>
void batch_norm_fwd(const T* x, const T* w, const T* b, T* rm, T* rv, bool training,
                    double momentum, double eps, T* y, T* save_mean, T* save_rstd,
                    const BnShape& s) {
  const int64_t M = s.N * s.S;
  parallel_for(
      s.C, std::max<int64_t>(1, kGrain / std::max<int64_t>(M, 1)), [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          double m, rstd;
          if (training) {
            double sum = 0;
            for (int64_t n = 0; n < s.N; ++n) sum += sum_d(x + (n * s.C + c) * s.S, s.S);
            m = sum / static_cast<double>(M);
            double sq = 0;
            for (int64_t n = 0; n < s.N; ++n) sq += sq_dev_d(x + (n * s.C + c) * s.S, s.S, m);
            const double var = sq / static_cast<double>(M);
            rstd = 1.0 / std::sqrt(var + eps);
            if (save_mean) save_mean[c] = static_cast<T>(m);
            if (save_rstd) save_rstd[c] = static_cast<T>(rstd);
            if (rm) {
              rm[c] = static_cast<T>((1.0 - momentum) * static_cast<double>(rm[c]) + momentum * m);
            }
            if (rv) {
              const double unbiased = sq / static_cast<double>(M - 1);
              rv[c] = static_cast<T>((1.0 - momentum) * static_cast<double>(rv[c]) +
                                     momentum * unbiased);
            }
          } else {
            m = rm ? static_cast<double>(rm[c]) : 0.0;
            rstd = 1.0 / std::sqrt((rv ? static_cast<double>(rv[c]) : 1.0) + eps);
          }
          // y = x * scale + shift
          const double scale = rstd * (w ? static_cast<double>(w[c]) : 1.0);
          const double shift = (b ? static_cast<double>(b[c]) : 0.0) - m * scale;
          const T sc = static_cast<T>(scale), sh = static_cast<T>(shift);
          for (int64_t n = 0; n < s.N; ++n) {
            const T* xp = x + (n * s.C + c) * s.S;
            T* yp = y + (n * s.C + c) * s.S;
#pragma omp simd
            for (int64_t i = 0; i < s.S; ++i) yp[i] = xp[i] * sc + sh;
          }
        }
      });
}

// gx = w rstd / M * (M g - sum g - xhat sum(g xhat)); gw = sum g xhat; gb = sum g.
template <typename T>
void batch_norm_bwd(const T* g, const T* x, const T* w, const T* save_mean, const T* save_rstd,
                    T* gx, T* gw, T* gb, const BnShape& s) {
  const int64_t M = s.N * s.S;
  parallel_for(s.C, std::max<int64_t>(1, kGrain / std::max<int64_t>(M, 1)),
               [&](int64_t c0, int64_t c1) {
                 for (int64_t c = c0; c < c1; ++c) {
                   const T m = save_mean[c], rs = save_rstd[c];
                   double sg = 0, sgx = 0;
                   for (int64_t n = 0; n < s.N; ++n) {
                     const T* gp = g + (n * s.C + c) * s.S;
                     const T* xp = x + (n * s.C + c) * s.S;
#pragma omp simd reduction(+ : sg, sgx)
                     for (int64_t i = 0; i < s.S; ++i) {
                       sg += static_cast<double>(gp[i]);
                       sgx += static_cast<double>(gp[i] * (xp[i] - m));
                     }
                   }
                   sgx *= static_cast<double>(rs);  // sum g * xhat
                   if (gw) gw[c] = static_cast<T>(sgx);
                   if (gb) gb[c] = static_cast<T>(sg);
                   if (!gx) continue;
                   const double k = (w ? static_cast<double>(w[c]) : 1.0) * static_cast<double>(rs);
                   const T a = static_cast<T>(k);                                   // * g
                   const T bsub = static_cast<T>(k * sg / static_cast<double>(M));  // constant
                   const T cx = static_cast<T>(k * sgx / static_cast<double>(M) *
                                               static_cast<double>(rs));  // * (x - m)
                   for (int64_t n = 0; n < s.N; ++n) {
                     const T* gp = g + (n * s.C + c) * s.S;
                     const T* xp = x + (n * s.C + c) * s.S;
                     T* op = gx + (n * s.C + c) * s.S;
#pragma omp simd
                     for (int64_t i = 0; i < s.S; ++i) op[i] = a * gp[i] - bsub - cx * (xp[i] - m);
                   }
                 }
               });
}

}  // namespace

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                            const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const int64_t rows = rstd.numel();
  if (rows == 0 || x.numel() == 0) return;
  const int64_t cols = x.numel() / rows;
  F32Args f{*this, {}};
  const Tensor xf = f.in(x), wf = f.in(weight), bf = f.in(bias);
  const Tensor of = f.out(out), mf = f.out(mean), rf = f.out(rstd);
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    layer_norm_fwd(xf.data_ptr<T>(), ptr<T>(wf), ptr<T>(bf), eps, of.data_ptr<T>(), mut_ptr<T>(mf),
                   rf.data_ptr<T>(), rows, cols);
  });
  f.finish();
}

void CpuBackend::layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                                     const Tensor& grad_weight, const Tensor& grad_bias) {
  const int64_t rows = rstd.numel();
  if (rows == 0 || x.numel() == 0) {
    if (grad_weight.defined()) fill(grad_weight, 0.0);
    if (grad_bias.defined()) fill(grad_bias, 0.0);
    return;
  }
  const int64_t cols = x.numel() / rows;
  F32Args f{*this, {}};
  const Tensor gf = f.in(grad_out), xf = f.in(x), wf = f.in(weight), mf = f.in(mean),
               rf = f.in(rstd);
  const Tensor gxf = f.out(grad_x), gwf = f.out(grad_weight), gbf = f.out(grad_bias);
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    layer_norm_bwd(gf.data_ptr<T>(), xf.data_ptr<T>(), ptr<T>(wf), ptr<T>(mf), rf.data_ptr<T>(),
                   mut_ptr<T>(gxf), mut_ptr<T>(gwf), mut_ptr<T>(gbf), rows, cols);
  });
  f.finish();
}

void CpuBackend::batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const Tensor& running_mean, const Tensor& running_var, bool training,
                            double momentum, double eps, const Tensor& out, const Tensor& save_mean,
                            const Tensor& save_rstd) {
  const BnShape s = bn_shape(x);
  F32Args f{*this, {}};
  const Tensor xf = f.in(x), wf = f.in(weight), bf = f.in(bias);
  const Tensor rmf = f.out(running_mean, true), rvf = f.out(running_var, true);
  const Tensor of = f.out(out);
  const Tensor smf = training ? f.out(save_mean) : Tensor();
  const Tensor srf = training ? f.out(save_rstd) : Tensor();
  if (x.numel() > 0 || !training) {
    dispatch_f(xf.dtype(), [&](auto tag) {
      using T = decltype(tag);
      batch_norm_fwd(xf.data_ptr<T>(), ptr<T>(wf), ptr<T>(bf), mut_ptr<T>(rmf), mut_ptr<T>(rvf),
                     training, momentum, eps, of.data_ptr<T>(), mut_ptr<T>(smf), mut_ptr<T>(srf),
                     s);
    });
  }
  f.finish();
}

void CpuBackend::batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                                     const Tensor& save_mean, const Tensor& save_rstd,
                                     const Tensor& grad_x, const Tensor& grad_weight,
                                     const Tensor& grad_bias) {
  const BnShape s = bn_shape(x);
  F32Args f{*this, {}};
  const Tensor gf = f.in(grad_out), xf = f.in(x), wf = f.in(weight), mf = f.in(save_mean),
               rf = f.in(save_rstd);
  const Tensor gxf = f.out(grad_x), gwf = f.out(grad_weight), gbf = f.out(grad_bias);
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    batch_norm_bwd(gf.data_ptr<T>(), xf.data_ptr<T>(), ptr<T>(wf), mf.data_ptr<T>(),
                   rf.data_ptr<T>(), mut_ptr<T>(gxf), mut_ptr<T>(gwf), mut_ptr<T>(gbf), s);
  });
  f.finish();
}

}  // namespace gradus::backend::cpu
