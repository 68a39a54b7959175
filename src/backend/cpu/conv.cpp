// conv2d forward, backward-data and backward-weight on the CPU (float32 / float64; bf16 on oneDNN
// where the CPU has bf16 instructions, half_conv.h; otherwise half types via float32 copies). The
// arithmetic is the register-blocked micro-kernel of conv_kernels.h, which broadcasts input values
// straight out of a zero-padded image through offset tables (no im2col, no BLAS) against a vector
// operand contiguous along output channels:
//   forward:          rows = output positions, loop = taps (c, kh, kw), vectors = weights^T.
//                     Whole rows of a multiple of 7 positions (MNIST, ResNet sizes) run as unit
//                     tiles that store straight into NCHW; other shapes go through a [P][O] tile
//                     buffer and a blocked transpose.
//   backward-data:    stride 1 -> the forward of grad_out with flipped, transposed weights;
//                     otherwise (or with very few input channels) column tiles + col2im.
//   backward-weight:  rows = taps, loop = positions, vectors = grad_out^T (transposed per image;
//                     the bias gradient is summed from that copy); small reductions over long
//                     planes (a first layer) use dot products along positions instead.
// Work is split over images (and over position / tap chunks when the batch is smaller than the
// thread count); every thread owns its scratch buffers, kept between calls (thread_local), and
// reductions go through per-thread partial sums (deterministic for a given thread count).
// The kernels exist twice, AVX-512 (picked at run time when the CPU has it, even though GCC 12
// builds use -mno-avx512f; 2x the AVX2 speed) and the build's own ISA; GRADUS_CONV_ISA=base in
// the environment forces the latter.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backend/cpu/avx512_dispatch.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/float_args.h"
#include "backend/cpu/half_conv.h"
#include "backend/cpu/loops.h"

// The kernels twice (see conv_kernels.h): with AVX-512 for CPUs that have it, whatever the build
// flags (GCC only: the pragma), and with the build's own flags.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX512F__)
#define GRADUS_CONV_DISPATCH_AVX512 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")
// (Everything here is internal to this file, so the ABI note about passing __m512 is moot.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
namespace gradus::backend::cpu::convk512 {
namespace {
#define GRADUS_CONVK_AVX512 1
#include "backend/cpu/conv_kernels.h"  // NOLINT(build/include): included twice by design
#undef GRADUS_CONVK_AVX512
}  // namespace
}  // namespace gradus::backend::cpu::convk512
#pragma GCC diagnostic pop
#pragma GCC pop_options
#else
#define GRADUS_CONV_DISPATCH_AVX512 0
#endif

namespace gradus::backend::cpu::convk_base {
namespace {
#if defined(__AVX512F__)
#define GRADUS_CONVK_AVX512 1
#else
#define GRADUS_CONVK_AVX512 0
#endif
#include "backend/cpu/conv_kernels.h"  // NOLINT(build/include): included twice by design
#undef GRADUS_CONVK_AVX512
}  // namespace
}  // namespace gradus::backend::cpu::convk_base

namespace gradus::backend::cpu {
namespace {

template <typename T>
T* scratch(std::vector<T>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// Scratch that persists between calls (no page faults from fresh allocations), zero filled.
template <typename T>
T* zeroed_scratch(std::vector<T>& buf, size_t n) {
  T* p = scratch(buf, n);
  std::fill(p, p + n, T(0));
  return p;
}

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Bytes of packed weights per reduction chunk (see kchunk_for); 16-40 KB measured within noise.
constexpr int64_t kChunkBytes = 28 * 1024;

// ---------------------------------------------------------------------------------- geometry
struct Geom {
  int64_t N, C, H, W, O, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw, G;
  int64_t Cg() const { return C / G; }
  int64_t Og() const { return O / G; }
  int64_t K() const { return Cg() * KH * KW; }  // reduction length per group
  int64_t P() const { return OH * OW; }
  int64_t Hp() const { return H + 2 * ph; }
  int64_t Wp() const { return W + 2 * pw; }
  int64_t plane() const { return Hp() * Wp(); }
  bool padded() const { return ph != 0 || pw != 0; }
  int64_t macs() const { return N * O * P() * K(); }  // multiply-adds of the whole convolution
};

// Multiply-adds a thread should get at least (about 5 us of work): smaller convolutions use fewer
// threads, the tiny ones (gradient checks, the first layers of small models) only the caller.
constexpr int64_t kConvGrain = int64_t{1} << 17;

Geom make_geom(const Tensor& x, const Tensor& w, const Tensor& out, const Conv2dArgs& a) {
  return {x.size(0), x.size(1),    x.size(2),    x.size(3),  w.size(0),  w.size(2),
          w.size(3), out.size(2),  out.size(3),  a.stride_h, a.stride_w, a.pad_h,
          a.pad_w,   a.dilation_h, a.dilation_w, a.groups};
}

// koff[(c, kh, kw)]: offset of a kernel tap inside the padded image of one group.
std::vector<int64_t> kernel_offsets(const Geom& g) {
  std::vector<int64_t> off(static_cast<size_t>(g.K()));
  size_t k = 0;
  for (int64_t c = 0; c < g.Cg(); ++c)
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw)
        off[k++] = c * g.plane() + kh * g.dh * g.Wp() + kw * g.dw;
  return off;
}

// qoff[(oh, ow)]: offset of an output position's window origin inside the padded image.
std::vector<int64_t> position_offsets(const Geom& g) {
  std::vector<int64_t> off(static_cast<size_t>(g.P()));
  size_t q = 0;
  for (int64_t oh = 0; oh < g.OH; ++oh)
    for (int64_t ow = 0; ow < g.OW; ++ow) off[q++] = oh * g.sh * g.Wp() + ow * g.sw;
  return off;
}

// dst[0..n) = src[0..n) for the short rows of feature maps: fixed-size (inlined, vector) moves,
// the last one overlapping, instead of a memcpy call or a loop per row.
template <typename T>
inline void copy_short_row(T* dst, const T* src, int64_t n) {
  constexpr int64_t v = 64 / sizeof(T);  // elements per 64-byte move
  if (n >= v) {
    int64_t i = 0;
    for (; i + v <= n; i += v) std::memcpy(dst + i, src + i, 64);
    if (i < n) std::memcpy(dst + n - v, src + n - v, 64);
  } else if (n >= v / 2) {
    std::memcpy(dst, src, 32);
    std::memcpy(dst + n - v / 2, src + n - v / 2, 32);
  } else if (n >= v / 4) {
    std::memcpy(dst, src, 16);
    std::memcpy(dst + n - v / 4, src + n - v / 4, 16);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

// A thread's zero-padded copy of one image, [C, Hp, Wp]. The zero border is written once per
// call (image rows never touch it), so each image costs only its row copies. (Per-row border
// loops are worse than they look: GCC turns each into a memset call.)
template <typename T>
class PaddedImage {
 public:
  PaddedImage(const Geom& g, std::vector<T>& storage) : g_(g) {
    if (!g.padded()) return;
    buf_ = scratch(storage, static_cast<size_t>(g.C * g.plane()));
    std::fill(buf_, buf_ + g.C * g.plane(), T(0));
  }
  // Image x [C, H, W] with its padding; x itself when there is none.
  const T* load(const T* x) {
    if (!buf_) return x;
    for (int64_t c = 0; c < g_.C; ++c)
      for (int64_t h = 0; h < g_.H; ++h)
        copy_short_row(buf_ + c * g_.plane() + (h + g_.ph) * g_.Wp() + g_.pw,
                       x + (c * g_.H + h) * g_.W, g_.W);
    return buf_;
  }

 private:
  const Geom& g_;
  T* buf_ = nullptr;
};

// Splits n_items images over the threads; with fewer images than threads each image is cut
// into `parts` chunks of its row range.
struct Split {
  int64_t parts, items;
};
Split split_work(int64_t n_images, int threads) {
  const int64_t parts = n_images >= threads ? 1 : ceil_div(threads, std::max<int64_t>(1, n_images));
  return {parts, n_images * parts};
}

// Positions per forward chunk (see conv_forward).
constexpr int64_t kPositionChunk = 48;

// Prefetches (into L2) slice `part` of `parts` of [p, p + n): the next image's input is pulled in
// piecewise while the current one is computed, instead of stalling the padding/transposing.
template <typename T>
void prefetch_slice(const T* p, int64_t n, int64_t part, int64_t parts) {
  const int64_t per = ceil_div(n, parts);
  const char* b = reinterpret_cast<const char*>(p + std::min(n, part * per));
  const char* e = reinterpret_cast<const char*>(p + std::min(n, (part + 1) * per));
  for (; b < e; b += 64) __builtin_prefetch(b, 0, 2);
}

// Reduction chunk: whole kernel windows (multiples of taps) whose B rows (row_bytes each) fit in
// L1 next to the image rows they meet, so they are reused from L1 by every tile.
// Chunks are balanced (288 taps in 3 x 96, not 90 + 90 + 90 + 18).
int64_t kchunk_for(int64_t K, int64_t taps, int64_t row_bytes) {
  const int64_t rows = std::max<int64_t>(taps, kChunkBytes / row_bytes / taps * taps);
  const int64_t chunks = ceil_div(K, rows);
  return std::min(K, ceil_div(ceil_div(K, chunks), taps) * taps);
}

// ------------------------------------------------------------------------------------ forward
template <typename KS, typename T>
void conv_forward(const T* x, const T* w, const T* bias, T* out, const Geom& g) {
  constexpr int64_t W = KS::template width<T>;
  const int64_t Cg = g.Cg(), Og = g.Og(), K = g.K(), P = g.P();
  const int64_t nvec = ceil_div(Og, W), Opad = nvec * W;
  // Packed weights per group: [K][Opad] (output channels contiguous, zero padded); bias [Opad].
  static thread_local std::vector<T> wpk_buf, bpk_buf;
  // (Padded channels must be zero; without any, every element is written below.)
  T* wpk = Og < Opad ? zeroed_scratch(wpk_buf, static_cast<size_t>(g.G * K * Opad))
                     : scratch(wpk_buf, static_cast<size_t>(g.G * K * Opad));
  T* bpk = zeroed_scratch(bpk_buf, static_cast<size_t>(g.G * Opad));
  for (int64_t gi = 0; gi < g.G; ++gi)
    for (int64_t o = 0; o < Og; ++o) {
      for (int64_t k = 0; k < K; ++k) wpk[(gi * K + k) * Opad + o] = w[(gi * Og + o) * K + k];
      if (bias) bpk[gi * Opad + o] = bias[gi * Og + o];
    }
  const std::vector<int64_t> koff = kernel_offsets(g), qoff = position_offsets(g);
  const int threads = threads_for(g.macs(), kConvGrain);
  const Split split = split_work(g.N, threads);
  const int64_t chunk = ceil_div(P, split.parts);
  const int64_t kchunk = kchunk_for(K, g.KH * g.KW, Opad * static_cast<int64_t>(sizeof(T)));

#pragma omp parallel num_threads(threads)
  {
    static thread_local std::vector<T> pad_buf, tmp_buf;
    PaddedImage<T> padder(g, pad_buf);
    T* tmp = scratch(tmp_buf, static_cast<size_t>(std::min(chunk, P) * Opad));
    int64_t last_n = -1;
    const T* img = nullptr;
#pragma omp for schedule(static)
    for (int64_t item = 0; item < split.items; ++item) {
      const int64_t n = item / split.parts, q0 = (item % split.parts) * chunk;
      const int64_t q1 = std::min(P, q0 + chunk);
      if (q0 >= q1) continue;
      if (n != last_n) img = padder.load(x + n * g.C * g.H * g.W), last_n = n;
      for (int64_t gi = 0; gi < g.G; ++gi) {
        T* og = out + (n * g.O + gi * Og) * P;
        const T* ig = img + gi * Cg * g.plane();
        // Unit tiles: whole output rows of a multiple of 7 positions at stride 1 (ResNet's and
        // MNIST's sizes) run as 7/14-position tiles and the last reduction chunk stores its
        // results straight into NCHW. Otherwise, tiles of any positions go through tmp
        // ([P][Opad]) and are transposed into NCHW per position chunk.
        const bool unit =
            KS::unit_tiles && g.sw == 1 && g.OW % 7 == 0 && q0 % g.OW == 0 && q1 % g.OW == 0;
        const int64_t pchunk =
            unit ? std::max<int64_t>(1, kPositionChunk / g.OW) * g.OW : kPositionChunk;
        for (int64_t qa = q0; qa < q1; qa += pchunk) {
          const int64_t qb = std::min(q1, qa + pchunk);
          // Reduction in chunks whose packed weights stay in L1 across the position tiles.
          for (int64_t k0 = 0; k0 < K; k0 += kchunk) {
            const int64_t len = std::min(kchunk, K - k0);
            const T* bk = wpk + (gi * K + k0) * Opad;
            const T* init = bias && k0 == 0 ? bpk + gi * Opad : nullptr;
            T* C = tmp + (qa - q0) * Opad;
            if (unit) {
              T* direct = k0 + len == K ? og : nullptr;
              KS::template tiles_unit<T>(ig, qoff.data(), qa, qb, koff.data() + k0, len, bk, Opad,
                                         nvec, C, Opad, init, k0 > 0, g.OW, direct, P, Og);
            } else {
              KS::template tiles<T>(ig, qoff.data(), qa, qb, koff.data() + k0, len, bk, Opad, nvec,
                                    C, Opad, init, k0 > 0);
            }
          }
          if (!unit)
            KS::template transpose_block<T>(tmp + (qa - q0) * Opad, qb - qa, Og, Opad, og + qa, P);
        }
      }
    }
  }
}

// ----------------------------------------------------------------------------- backward weight
// grad_w^T[k][o] = sum_n sum_q x_pad[koff[k] + qoff[q]] * grad_out^T[q][o]; grad_out is transposed
// per image ([O][P] -> [P][Opad]), and the bias gradient is summed from that transposed copy
// while it is hot (no second pass over grad_out).
template <typename KS, typename T>
void conv_backward_weight(const T* gy, const T* x, T* gw, T* gb, const Geom& g) {
  constexpr int64_t W = KS::template width<T>;
  const int64_t Cg = g.Cg(), Og = g.Og(), K = g.K(), P = g.P();
  const int64_t nvec = ceil_div(Og, W), Opad = nvec * W;
  const std::vector<int64_t> koff = kernel_offsets(g), qoff = position_offsets(g);
  const int threads = threads_for(g.macs(), kConvGrain);
  const Split split = split_work(g.N, threads);
  const int64_t chunk = ceil_div(K, split.parts);
  // Per-thread partial sums of grad_w^T [threads][G][K][Opad] and of the bias [threads][G][Opad]
  // (double), reduced at the end.
  const int64_t part_size = g.G * K * Opad, bias_size = g.G * Opad;
  static thread_local std::vector<T> partial_buf;
  static thread_local std::vector<double> bias_buf;
  T* partial = scratch(partial_buf, static_cast<size_t>(threads * part_size));
  double* bias_part = scratch(bias_buf, static_cast<size_t>(threads * bias_size));

#pragma omp parallel num_threads(threads)
  {
    static thread_local std::vector<T> pad_buf, gyt_buf;
    // The image's bias gradient, summed in double like the partials it is added to: a float sum
    // of P values that cancel is off by several ulps of the result.
    static thread_local std::vector<double> bsum_buf;
    PaddedImage<T> padder(g, pad_buf);
    T* part = partial + omp_get_thread_num() * part_size;
    std::fill(part, part + part_size, T(0));
    double* bpart = bias_part + omp_get_thread_num() * bias_size;
    std::fill(bpart, bpart + bias_size, 0.0);
    // Columns past Og are never written and must read as zero.
    T* gyt = Og < Opad ? zeroed_scratch(gyt_buf, static_cast<size_t>(P * Opad))
                       : scratch(gyt_buf, static_cast<size_t>(P * Opad));
    double* bsum = scratch(bsum_buf, static_cast<size_t>(Opad));
#pragma omp for schedule(static)
    for (int64_t item = 0; item < split.items; ++item) {
      const int64_t n = item / split.parts, k0 = (item % split.parts) * chunk;
      const int64_t k1 = std::min(K, k0 + chunk);
      if (k0 >= k1) continue;
      const T* img = padder.load(x + n * g.C * g.H * g.W);
      for (int64_t gi = 0; gi < g.G; ++gi) {
        KS::template transpose_block<T>(gy + (n * g.O + gi * Og) * P, Og, P, P, gyt,
                                        Opad);  // [Og][P] -> [P][Opad]
        if (gb && k0 == 0) {                    // one chunk per image adds its bias gradient
          std::fill(bsum, bsum + Opad, 0.0);
          for (int64_t q = 0; q < P; ++q) {
            const T* row = gyt + q * Opad;
#pragma omp simd
            for (int64_t o = 0; o < Opad; ++o) bsum[o] += static_cast<double>(row[o]);
          }
          for (int64_t o = 0; o < Og; ++o) bpart[gi * Opad + o] += bsum[o];
        }
        // In pieces, prefetching the next image's grad_out and x in between.
        // (Pieces are whole tiles: a split tile would run the loop over positions twice.)
        const int64_t pieces = split.parts == 1 && n + 1 < g.N ? 8 : 1;
        const int64_t rows = KS::rows(std::min<int64_t>(KS::max_vecs, nvec));
        const int64_t step = ceil_div(ceil_div(k1 - k0, pieces), rows) * rows;
        for (int64_t i = 0; i < pieces; ++i) {
          const int64_t ka = k0 + i * step, kb = std::min(k1, ka + step);
          if (pieces > 1 && gi + 1 == g.G) {
            prefetch_slice(gy + (n + 1) * g.O * P, g.O * P, i, pieces);
            prefetch_slice(x + (n + 1) * g.C * g.H * g.W, g.C * g.H * g.W, i, pieces);
          }
          if (ka < kb) {
            KS::template tiles<T>(img + gi * Cg * g.plane(), koff.data(), ka, kb, qoff.data(), P,
                                  gyt, Opad, nvec, part + (gi * K + ka) * Opad, Opad, nullptr,
                                  true);
          }
        }
      }
    }
    // grad_w[g*Og + o][k] = sum over threads of partial[t][g][k][o]; likewise the bias. (The
    // team may be smaller than `threads`, e.g. when called inside another parallel region.)
    const int team = omp_get_num_threads();
#pragma omp for schedule(static)
    for (int64_t go = 0; go < g.O; ++go) {
      const int64_t gi = go / Og, o = go % Og;
      T* dst = gw + go * K;
      for (int64_t k = 0; k < K; ++k) {
        T s = 0;
        for (int t = 0; t < team; ++t) s += partial[t * part_size + (gi * K + k) * Opad + o];
        dst[k] = s;
      }
      if (gb) {
        double b = 0;
        for (int t = 0; t < team; ++t) b += bias_part[t * bias_size + gi * Opad + o];
        gb[go] = static_cast<T>(b);
      }
    }
  }
}

// Backward weight for small reductions (a first layer: K = C * KH * KW of a few dozen) over long
// planes: transposing grad_out would cost more than the arithmetic, so instead each image's
// columns X [K (+1 row of ones for the bias)][P] are built (cheap when K is small) and
// grad_w[o][k] = sum_q grad_out[o][q] * X[k][q] is taken as dot products vectorised along q, kept
// as per-lane partial sums across images and reduced once at the end.
template <typename KS, typename T>
bool backward_weight_by_dots(const Geom& g, int threads) {
  return g.K() <= 32 && g.P() >= 8 * KS::template width<T> && g.N >= threads;
}

template <typename KS, typename T>
void conv_backward_weight_dots(const T* gy, const T* x, T* gw, T* gb, const Geom& g) {
  constexpr int64_t W = KS::template width<T>;
  const int64_t Cg = g.Cg(), Og = g.Og(), K = g.K(), P = g.P();
  const int64_t Kb = K + (gb ? 1 : 0);  // a row of ones yields the bias gradient
  const int64_t nvec = P / W;           // full vectors; the rest is added lane by lane
  const std::vector<int64_t> koff = kernel_offsets(g), qoff = position_offsets(g);
  const int threads = threads_for(g.macs(), kConvGrain);
  const int64_t part_size = g.O * Kb * W;  // [O][Kb][W] lane partials per thread
  static thread_local std::vector<T> partial_buf;
  T* partial = scratch(partial_buf, static_cast<size_t>(threads * part_size));

#pragma omp parallel num_threads(threads)
  {
    static thread_local std::vector<T> pad_buf, col_buf;
    PaddedImage<T> padder(g, pad_buf);
    T* part = partial + omp_get_thread_num() * part_size;
    std::fill(part, part + part_size, T(0));
    T* col = scratch(col_buf, static_cast<size_t>(Kb * P));
    if (gb) std::fill(col + K * P, col + Kb * P, T(1));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.N; ++n) {
      const T* img = padder.load(x + n * g.C * g.H * g.W);
      for (int64_t gi = 0; gi < g.G; ++gi) {
        const T* ig = img + gi * Cg * g.plane();
        for (int64_t k = 0; k < K; ++k) {  // columns (im2col) of this group, row by row
          for (int64_t oh = 0; oh < g.OH; ++oh) {
            const T* src = ig + koff[k] + qoff[oh * g.OW];
            T* dst = col + k * P + oh * g.OW;
            if (g.sw == 1) {
              copy_short_row(dst, src, g.OW);
            } else {
              for (int64_t ow = 0; ow < g.OW; ++ow) dst[ow] = src[ow * g.sw];
            }
          }
        }
        const T* gyg = gy + (n * g.O + gi * Og) * P;
        T* pg = part + gi * Og * Kb * W;
        const int64_t tiles = ceil_div(Og, KS::dot_rows);
        for (int64_t o0 = 0; o0 < Og; o0 += KS::dot_rows) {
          const int na = static_cast<int>(std::min<int64_t>(KS::dot_rows, Og - o0));
          if (n + 1 < g.N) {  // pull the next image's grad_out and input in meanwhile
            prefetch_slice(gy + (n + 1) * g.O * P + gi * Og * P, Og * P, o0 / KS::dot_rows, tiles);
            if (gi == 0) {
              prefetch_slice(x + (n + 1) * g.C * g.H * g.W, g.C * g.H * g.W, o0 / KS::dot_rows,
                             tiles);
            }
          }
          for (int64_t k0 = 0; k0 < Kb; k0 += KS::dot_cols) {
            const int nb = static_cast<int>(std::min<int64_t>(KS::dot_cols, Kb - k0));
            KS::template dots<T>(gyg + o0 * P, P, na, col + k0 * P, P, nb, nvec,
                                 pg + (o0 * Kb + k0) * W, Kb);
            for (int64_t q = nvec * W; q < P; ++q)  // the last partial vector, lane 0
              for (int i = 0; i < na; ++i)
                for (int j = 0; j < nb; ++j)
                  pg[((o0 + i) * Kb + k0 + j) * W] += gyg[(o0 + i) * P + q] * col[(k0 + j) * P + q];
          }
        }
      }
    }
    const int team = omp_get_num_threads();
#pragma omp for schedule(static)
    for (int64_t o = 0; o < g.O; ++o) {
      for (int64_t k = 0; k < Kb; ++k) {
        double s = 0;
        for (int t = 0; t < team; ++t)
          for (int64_t l = 0; l < W; ++l)
            s += static_cast<double>(partial[t * part_size + (o * Kb + k) * W + l]);
        if (k < K)
          gw[o * K + k] = static_cast<T>(s);
        else
          gb[o] = static_cast<T>(s);
      }
    }
  }
}

// ------------------------------------------------------------------------------- backward data
// Stride 1 with pad <= dilation * (k - 1): grad_x is the forward convolution of grad_out with the
// flipped, transposed weights and padding dilation * (k - 1) - pad.
// That forward vectorises over the input channels per group; with only a few of them (a first
// layer on 1-3 channels) most vector lanes would idle, and the column path, which vectorises over
// Cg * KH * KW, wins despite its scatter (weighted 1/2 for it).
template <typename KS, typename T>
bool backward_data_as_forward(const Geom& g) {
  if (g.sh != 1 || g.sw != 1 || g.ph > g.dh * (g.KH - 1) || g.pw > g.dw * (g.KW - 1)) return false;
  constexpr int64_t W = KS::template width<T>;
  const double lanes_flip =
      static_cast<double>(g.Cg()) / static_cast<double>(ceil_div(g.Cg(), W) * W);
  const double lanes_col = static_cast<double>(g.K()) / static_cast<double>(ceil_div(g.K(), W) * W);
  return lanes_flip >= 0.5 * lanes_col;
}

template <typename KS, typename T>
void conv_backward_data_flipped(const T* gy, const T* w, T* gx, const Geom& g) {
  const int64_t Cg = g.Cg(), Og = g.Og(), KH = g.KH, KW = g.KW;
  static thread_local std::vector<T> wf_buf;
  T* wf = scratch(wf_buf, static_cast<size_t>(g.C * Og * KH * KW));  // [C][Og][KH][KW]
  for (int64_t gi = 0; gi < g.G; ++gi)
    for (int64_t o = 0; o < Og; ++o)
      for (int64_t c = 0; c < Cg; ++c)
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw)
            wf[(((gi * Cg + c) * Og + o) * KH + kh) * KW + kw] =
                w[(((gi * Og + o) * Cg + c) * KH + (KH - 1 - kh)) * KW + (KW - 1 - kw)];
  Geom t = g;  // grad_out [N, O, OH, OW] is the input, grad_x [N, C, H, W] the output
  t.C = g.O, t.H = g.OH, t.W = g.OW, t.O = g.C, t.OH = g.H, t.OW = g.W;
  t.sh = t.sw = 1;
  t.ph = g.dh * (KH - 1) - g.ph, t.pw = g.dw * (KW - 1) - g.pw;
  conv_forward<KS>(gy, static_cast<const T*>(wf), static_cast<const T*>(nullptr), gx, t);
}

// General case: per image, column tiles colT[q][(c, kh, kw)] = sum_o grad_out[o][q] * w[o][k]
// scattered back into a padded grad_x (col2im).
template <typename KS, typename T>
void conv_backward_data_col2im(const T* gy, const T* w, T* gx, const Geom& g) {
  constexpr int64_t W = KS::template width<T>;
  const int64_t Cg = g.Cg(), Og = g.Og(), K = g.K(), P = g.P();
  const int64_t nvec = ceil_div(K, W), Kpad = nvec * W;
  std::vector<T> wpk(static_cast<size_t>(g.G * Og * Kpad), T(0));  // [G][Og][Kpad]
  for (int64_t go = 0; go < g.O; ++go)
    std::copy(w + go * K, w + (go + 1) * K, wpk.begin() + go * Kpad);
  const std::vector<int64_t> koff = kernel_offsets(g), qoff = position_offsets(g);
  std::vector<int64_t> qid(static_cast<size_t>(P)), ooff(static_cast<size_t>(Og));
  for (int64_t q = 0; q < P; ++q) qid[q] = q;
  for (int64_t o = 0; o < Og; ++o) ooff[o] = o * P;
  const int64_t qchunk = std::min<int64_t>(P, 256);

#pragma omp parallel num_threads(threads_for(g.macs(), kConvGrain))
  {
    static thread_local std::vector<T> gxp_buf, col_buf;
    T* gxp = scratch(gxp_buf, static_cast<size_t>(g.C * g.plane()));
    T* col = scratch(col_buf, static_cast<size_t>(qchunk * Kpad));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < g.N; ++n) {
      std::fill(gxp, gxp + g.C * g.plane(), T(0));
      for (int64_t gi = 0; gi < g.G; ++gi) {
        T* gxg = gxp + gi * Cg * g.plane();
        for (int64_t q0 = 0; q0 < P; q0 += qchunk) {
          const int64_t q1 = std::min(P, q0 + qchunk);
          KS::template tiles<T>(gy + (n * g.O + gi * Og) * P, qid.data(), q0, q1, ooff.data(), Og,
                                wpk.data() + gi * Og * Kpad, Kpad, nvec, col, Kpad, nullptr, false);
          for (int64_t q = q0; q < q1; ++q) {
            T* dst = gxg + qoff[q];
            const T* src = col + (q - q0) * Kpad;
            for (int64_t k = 0; k < K; ++k) dst[koff[k]] += src[k];
          }
        }
      }
      T* out = gx + n * g.C * g.H * g.W;
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t h = 0; h < g.H; ++h)
          std::memcpy(out + (c * g.H + h) * g.W, gxp + c * g.plane() + (h + g.ph) * g.Wp() + g.pw,
                      sizeof(T) * static_cast<size_t>(g.W));
    }
  }
}

// Which copy of the kernels runs: AVX-512 when the CPU has it (and this build has that copy),
// else the build-flag kernels. GRADUS_CONV_ISA=base forces the latter (tests cover both; also a
// way out should AVX-512 ever misbehave somewhere).
bool use_avx512_kernels() {
#if GRADUS_CONV_DISPATCH_AVX512
  return cpu_has_avx512() && !isa_forced_base("GRADUS_CONV_ISA");
#else
  return false;
#endif
}

// Calls fn(kernels) with the chosen kernel copy's interface (an empty tag object).
template <typename Fn>
void with_kernels(Fn&& fn) {
#if GRADUS_CONV_DISPATCH_AVX512
  if (use_avx512_kernels()) {
    fn(convk512::Kernels{});
    return;
  }
#endif
  fn(convk_base::Kernels{});
}

}  // namespace

// ------------------------------------------------------------------------------------ launchers
void CpuBackend::conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out,
                        const Conv2dArgs& args) {
  const Geom g = make_geom(x, w, out, args);
  if (out.numel() == 0) return;
  if (out.dtype() == DType::bf16 && native_bf16_conv2d(*this, x, w, bias, out, args)) return;
  F32Args f{*this, {}};
  const Tensor xf = f.in(x), wf = f.in(w), bf = f.in(bias), of = f.out(out);
  dispatch_f(xf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = of.data_ptr<T>();
    const T* b = ptr_or_null<T>(bf);
    if (g.K() == 0) {  // no input channels: the output is the bias
      for (int64_t i = 0; i < out.numel(); ++i) o[i] = b ? b[(i / g.P()) % g.O] : T(0);
      return;
    }
    with_kernels(
        [&](auto k) { conv_forward<decltype(k)>(xf.data_ptr<T>(), wf.data_ptr<T>(), b, o, g); });
  });
  f.finish();
}

void CpuBackend::conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Tensor& grad_x,
                                      const Conv2dArgs& args) {
  const Geom g = make_geom(grad_x, w, grad_out, args);
  if (grad_x.numel() == 0) return;
  if (grad_x.dtype() == DType::bf16 &&
      native_bf16_conv2d_backward_data(*this, grad_out, w, grad_x, args)) {
    return;
  }
  F32Args f{*this, {}};
  const Tensor gf = f.in(grad_out), wf = f.in(w), of = f.out(grad_x);
  dispatch_f(of.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* gx = of.data_ptr<T>();
    if (g.P() == 0 || g.Og() == 0) {
      std::fill(gx, gx + grad_x.numel(), T(0));
      return;
    }
    with_kernels([&](auto k) {
      using KS = decltype(k);
      if (backward_data_as_forward<KS, T>(g)) {
        conv_backward_data_flipped<KS>(gf.data_ptr<T>(), wf.data_ptr<T>(), gx, g);
      } else {
        conv_backward_data_col2im<KS>(gf.data_ptr<T>(), wf.data_ptr<T>(), gx, g);
      }
    });
  });
  f.finish();
}

void CpuBackend::conv2d_backward_weight(const Tensor& grad_out, const Tensor& x,
                                        const Tensor& grad_w, const Tensor& grad_bias,
                                        const Conv2dArgs& args) {
  const Geom g = make_geom(x, grad_w, grad_out, args);
  if (grad_w.dtype() == DType::bf16 &&
      native_bf16_conv2d_backward_weight(*this, grad_out, x, grad_w, grad_bias, args)) {
    return;
  }
  F32Args f{*this, {}};
  const Tensor gf = f.in(grad_out), xf = f.in(x), gwf = f.out(grad_w), gbf = f.out(grad_bias);
  dispatch_f(gwf.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* gw = gwf.data_ptr<T>();
    T* gb = gbf.defined() ? gbf.data_ptr<T>() : nullptr;
    if (g.N * g.P() == 0 || grad_w.numel() == 0) {  // empty sums
      std::fill(gw, gw + grad_w.numel(), T(0));
      for (int64_t o = 0; gb && o < g.O; ++o) {  // the bias gradient may still be non-empty
        double s = 0;
        for (int64_t n = 0; n < g.N; ++n)
          for (int64_t q = 0; q < g.P(); ++q)
            s += static_cast<double>(gf.data_ptr<T>()[(n * g.O + o) * g.P() + q]);
        gb[o] = static_cast<T>(s);
      }
      return;
    }
    with_kernels([&](auto k) {
      using KS = decltype(k);
      if (backward_weight_by_dots<KS, T>(g, omp_get_max_threads())) {
        conv_backward_weight_dots<KS>(gf.data_ptr<T>(), xf.data_ptr<T>(), gw, gb, g);
      } else {
        conv_backward_weight<KS>(gf.data_ptr<T>(), xf.data_ptr<T>(), gw, gb, g);
      }
    });
  });
  f.finish();
}

}  // namespace gradus::backend::cpu
