// conv2d forward, backward-data and backward-weight through cuDNN (NCHW).
//
// Algorithms are chosen once per problem (shape, dtype, geometry, math mode) and cached: cuDNN's
// heuristics rank candidates (cudnnGet*_v7), then, unless GRADUS_CUDNN_BENCHMARK=0, the
// candidates are timed on the real buffers (cudnnFind*AlgorithmEx) and the fastest is kept. In
// deterministic mode (gradus::set_deterministic) only algorithms cuDNN reports as deterministic
// are candidates, nothing is timed (the heuristic's first is taken), and the choice is cached
// per mode.
// Workspaces come from the pool allocator. f16 / bf16 run on tensor cores with float
// accumulation; float32 uses TF32 only when allowed (gradus::cuda::set_allow_tf32).
// The bias is added by the elementwise kernels; its gradient is a reduction over (N, H, W).
// Without cuDNN (or with GRADUS_CONV_IM2COL=1), and for a problem cuDNN's legacy NCHW API offers no
// algorithm for (some bf16 shapes, or none deterministic), convolutions run as im2col + GEMM
// (conv_im2col.cpp). Inside a CUDA graph capture nothing is timed (a search would launch and wait
// inside the capture): the heuristic's first algorithm runs, uncached, so the first uncaptured
// call still searches.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "backend/cuda/conv_im2col.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/runtime.h"
#include "backend/cuda/staging.h"
#include "gradus/core/determinism.h"

namespace gradus::backend::cuda {
namespace {

bool use_cudnn() {
#if GRADUS_HAS_CUDNN
  const char* env = std::getenv("GRADUS_CONV_IM2COL");  // read per call: tests switch it
  return env == nullptr || std::strcmp(env, "1") != 0;
#else
  return false;
#endif
}

#if GRADUS_HAS_CUDNN

enum class Dir { forward, backward_data, backward_filter };

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f64:
      return CUDNN_DATA_DOUBLE;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

bool benchmark_enabled() {
  static const bool on = [] {
    const char* env = std::getenv("GRADUS_CUDNN_BENCHMARK");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return on;
}

// Largest workspace an algorithm search may use.
constexpr size_t kMaxSearchWorkspace = size_t{1} << 30;

struct Descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~Descs() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

struct Problem {
  int device = 0;
  DType dtype = DType::f32;
  bool tf32 = false;
  bool deterministic = false;  // only algorithms cuDNN reports as CUDNN_DETERMINISTIC
  int64_t n = 0, c = 0, h = 0, w = 0, o = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  Conv2dArgs a;

  auto key(Dir dir) const {
    return std::make_tuple(static_cast<int>(dir), device, static_cast<int>(dtype), tf32,
                           deterministic, n, c, h, w, o, kh, kw, oh, ow, a.stride_h, a.stride_w,
                           a.pad_h, a.pad_w, a.dilation_h, a.dilation_w, a.groups);
  }
};

struct Choice {
  int algo = 0;
  size_t workspace = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

using Key = decltype(std::declval<Problem>().key(Dir::forward));
std::mutex g_mu;
std::map<Key, std::optional<Choice>> g_choices;  // nullopt: cuDNN has none (im2col runs)

int to_int(int64_t v, const char* what) {
  GRADUS_CHECK(v <= INT32_MAX, ValueError, "conv2d: ", what, " (", v,
               ") exceeds cuDNN's 32-bit limit");
  return static_cast<int>(v);
}

cudnnMathType_t default_math(const Problem& p) {
  if (p.dtype == DType::f16 || p.dtype == DType::bf16) return CUDNN_TENSOR_OP_MATH;
  if (p.dtype == DType::f32) return p.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  return CUDNN_DEFAULT_MATH;
}

void make_descs(const Problem& p, Descs& d, cudnnMathType_t math) {
  const char* op = "conv2d";
  const cudnnDataType_t t = cudnn_type(p.dtype);
  GRADUS_CHECK(p.n * p.c * p.h * p.w <= INT32_MAX && p.n * p.o * p.oh * p.ow <= INT32_MAX,
               ValueError, "conv2d: tensors of more than 2^31 elements are not supported on cuda");
  GRADUS_CUDNN_CHECK(op, cudnnCreateTensorDescriptor(&d.x));
  GRADUS_CUDNN_CHECK(op, cudnnCreateTensorDescriptor(&d.y));
  GRADUS_CUDNN_CHECK(op, cudnnCreateFilterDescriptor(&d.w));
  GRADUS_CUDNN_CHECK(op, cudnnCreateConvolutionDescriptor(&d.conv));
  GRADUS_CUDNN_CHECK(
      op, cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, t, to_int(p.n, "N"), to_int(p.c, "C"),
                                     to_int(p.h, "H"), to_int(p.w, "W")));
  GRADUS_CUDNN_CHECK(
      op, cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NCHW, t, to_int(p.n, "N"), to_int(p.o, "O"),
                                     to_int(p.oh, "OH"), to_int(p.ow, "OW")));
  GRADUS_CUDNN_CHECK(op, cudnnSetFilter4dDescriptor(d.w, t, CUDNN_TENSOR_NCHW, to_int(p.o, "O"),
                                                    to_int(p.c / p.a.groups, "C/groups"),
                                                    to_int(p.kh, "KH"), to_int(p.kw, "KW")));
  const cudnnDataType_t compute = p.dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  GRADUS_CUDNN_CHECK(op, cudnnSetConvolution2dDescriptor(
                             d.conv, to_int(p.a.pad_h, "pad"), to_int(p.a.pad_w, "pad"),
                             to_int(p.a.stride_h, "stride"), to_int(p.a.stride_w, "stride"),
                             to_int(p.a.dilation_h, "dilation"), to_int(p.a.dilation_w, "dilation"),
                             CUDNN_CROSS_CORRELATION, compute));
  GRADUS_CUDNN_CHECK(op, cudnnSetConvolutionGroupCount(d.conv, to_int(p.a.groups, "groups")));
  GRADUS_CUDNN_CHECK(op, cudnnSetConvolutionMathType(d.conv, math));
}

// Picks (and caches) the algorithm for one direction, or nullopt when cuDNN offers none. x / w / y
// are the real buffers (search only writes the direction's output).
std::optional<Choice> choose(const Problem& p, Dir dir, cudnnHandle_t h, const Descs& d,
                             const void* x, const void* w, const void* y, void* out) {
  const Key key = p.key(dir);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_choices.find(key);
    if (it != g_choices.end()) return it->second;
  }
  const char* op = "conv2d (algorithm search)";
  constexpr int kMax = 16;
  std::vector<Choice> ranked;
  auto collect = [&](const auto* perf, int count) {
    for (int i = 0; i < count; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      // Deterministic mode: algorithms that may sum in a varying order (split reductions with
      // atomics, common in backward-filter) are never candidates, searched or not.
      if (p.deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
      ranked.push_back({static_cast<int>(perf[i].algo), perf[i].memory, perf[i].mathType});
    }
  };
  int count = 0;
  if (dir == Dir::forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMax];
    GRADUS_CUDNN_CHECK(
        op, cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, kMax, &count, perf));
    collect(perf, count);
  } else if (dir == Dir::backward_data) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
    GRADUS_CUDNN_CHECK(op, cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x,
                                                                       kMax, &count, perf));
    collect(perf, count);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
    GRADUS_CUDNN_CHECK(op, cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w,
                                                                         kMax, &count, perf));
    collect(perf, count);
  }
  const bool capturing = capturing_device() >= 0;
  if (ranked.empty()) {
    if (!capturing) {
      std::lock_guard<std::mutex> lock(g_mu);
      g_choices.emplace(key, std::nullopt);
    }
    return std::nullopt;
  }
  Choice best = ranked.front();
  // Deterministic mode skips the timing: two processes could time two deterministic algorithms
  // in a different order and so sum in different orders. The heuristic's order is fixed.
  if (benchmark_enabled() && !p.deterministic && !capturing) {
    size_t ws_bytes = 0;
    for (const Choice& c : ranked) {
      if (c.workspace <= kMaxSearchWorkspace) ws_bytes = std::max(ws_bytes, c.workspace);
    }
    Workspace ws(ws_bytes, p.device, op);
    int found = 0;
    if (dir == Dir::forward) {
      cudnnConvolutionFwdAlgoPerf_t perf[kMax];
      GRADUS_CUDNN_CHECK(
          op, cudnnFindConvolutionForwardAlgorithmEx(h, d.x, x, d.w, w, d.conv, d.y, out, kMax,
                                                     &found, perf, ws.data(), ws_bytes));
      ranked.clear();
      collect(perf, found);
    } else if (dir == Dir::backward_data) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
      GRADUS_CUDNN_CHECK(
          op, cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, w, d.y, y, d.conv, d.x, out, kMax,
                                                          &found, perf, ws.data(), ws_bytes));
      ranked.clear();
      collect(perf, found);
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
      GRADUS_CUDNN_CHECK(
          op, cudnnFindConvolutionBackwardFilterAlgorithmEx(
                  h, d.x, x, d.y, y, d.conv, d.w, out, kMax, &found, perf, ws.data(), ws_bytes));
      ranked.clear();
      collect(perf, found);
    }
    if (!ranked.empty()) best = ranked.front();  // Find returns them fastest first
  }
  // Float32 without TF32 permission stays on FMA math whatever the search reported.
  if (default_math(p) == CUDNN_FMA_MATH) best.math = CUDNN_FMA_MATH;
  if (capturing) return best;  // untimed: the first call outside a capture searches
  std::lock_guard<std::mutex> lock(g_mu);
  g_choices.emplace(key, best);
  return best;
}

Problem make_problem(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dArgs& a) {
  Problem p;
  p.device = y.device().index();
  p.dtype = y.dtype();
  p.tf32 = p.dtype == DType::f32 && tf32_allowed();
  p.deterministic = is_deterministic();
  p.n = x.size(0);
  p.c = x.size(1);
  p.h = x.size(2);
  p.w = x.size(3);
  p.o = w.size(0);
  p.kh = w.size(2);
  p.kw = w.size(3);
  p.oh = y.size(2);
  p.ow = y.size(3);
  p.a = a;
  return p;
}

#endif  // GRADUS_HAS_CUDNN

#if GRADUS_HAS_CUDNN
struct Scale {
  double d1 = 1.0, d0 = 0.0;
  float f1 = 1.0f, f0 = 0.0f;
  const void* one(DType t) const { return t == DType::f64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(DType t) const { return t == DType::f64 ? static_cast<const void*>(&d0) : &f0; }
};
#endif

}  // namespace

void CudaBackend::conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& bias,
                         const Tensor& out, const Conv2dArgs& args) {
  if (out.numel() == 0) return;
  DeviceGuard guard(out);
  const DType t = out.dtype();
  if (x_in.numel() == 0 || w_in.numel() == 0) {  // an empty sum: the output is the bias
    fill(out, 0.0);
  } else {
    const Tensor x = contiguous_as(*this, x_in, t), w = contiguous_as(*this, w_in, t);
    into_contiguous(*this, out, [&](const Tensor& y) {
#if GRADUS_HAS_CUDNN
      if (use_cudnn()) {
        const Problem p = make_problem(x, w, y, args);
        const CudnnLease lease(p.device);
        cudnnHandle_t h = lease.get();
        Descs d;
        make_descs(p, d, default_math(p));
        const std::optional<Choice> found =
            choose(p, Dir::forward, h, d, x.raw_data(), w.raw_data(), nullptr, y.raw_data());
        if (!found) return im2col::forward(*this, x, w, y, args);
        const Choice& c = *found;
        GRADUS_CUDNN_CHECK("conv2d", cudnnSetConvolutionMathType(d.conv, c.math));
        Workspace ws(c.workspace, p.device, "conv2d");
        const Scale s;
        GRADUS_CUDNN_CHECK("conv2d", cudnnConvolutionForward(
                                         h, s.one(t), d.x, x.raw_data(), d.w, w.raw_data(), d.conv,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws.data(),
                                         c.workspace, s.zero(t), d.y, y.raw_data()));
        return;
      }
#endif
      im2col::forward(*this, x, w, y, args);
    });
  }
  if (bias.defined()) {
    // out[n, o, :, :] += bias[o]
    const Shape strides = {0, bias.stride(0), 0, 0};
    binary(BinaryOp::add, out, bias.as_strided_raw(out.sizes(), strides, bias.offset()), out, 1.0);
  }
}

void CudaBackend::conv2d_backward_data(const Tensor& grad_out, const Tensor& w_in,
                                       const Tensor& grad_x, const Conv2dArgs& args) {
  if (grad_x.numel() == 0) return;
  DeviceGuard guard(grad_x);
  const DType t = grad_x.dtype();
  if (grad_out.numel() == 0 || w_in.numel() == 0) {
    fill(grad_x, 0.0);
    return;
  }
  const Tensor gy = contiguous_as(*this, grad_out, t), w = contiguous_as(*this, w_in, t);
  into_contiguous(*this, grad_x, [&](const Tensor& gx) {
#if GRADUS_HAS_CUDNN
    if (use_cudnn()) {
      const Problem p = make_problem(gx, w, gy, args);
      const CudnnLease lease(p.device);
      cudnnHandle_t h = lease.get();
      Descs d;
      make_descs(p, d, default_math(p));
      const std::optional<Choice> found =
          choose(p, Dir::backward_data, h, d, nullptr, w.raw_data(), gy.raw_data(), gx.raw_data());
      if (!found) return im2col::backward_data(*this, gy, w, gx, args);
      const Choice& c = *found;
      GRADUS_CUDNN_CHECK("conv2d backward", cudnnSetConvolutionMathType(d.conv, c.math));
      Workspace ws(c.workspace, p.device, "conv2d backward");
      const Scale s;
      GRADUS_CUDNN_CHECK(
          "conv2d backward",
          cudnnConvolutionBackwardData(h, s.one(t), d.w, w.raw_data(), d.y, gy.raw_data(), d.conv,
                                       static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo),
                                       ws.data(), c.workspace, s.zero(t), d.x, gx.raw_data()));
      return;
    }
#endif
    im2col::backward_data(*this, gy, w, gx, args);
  });
}

void CudaBackend::conv2d_backward_weight(const Tensor& grad_out, const Tensor& x_in,
                                         const Tensor& grad_w, const Tensor& grad_bias,
                                         const Conv2dArgs& args) {
  DeviceGuard guard(grad_out);
  const DType t = grad_w.dtype();
  const bool empty_sum = grad_out.numel() == 0 || x_in.numel() == 0;
  if (grad_w.numel() > 0) {
    if (empty_sum) {
      fill(grad_w, 0.0);
    } else {
      const Tensor gy = contiguous_as(*this, grad_out, t), x = contiguous_as(*this, x_in, t);
      into_contiguous(*this, grad_w, [&](const Tensor& gw) {
#if GRADUS_HAS_CUDNN
        if (use_cudnn()) {
          const Problem p = make_problem(x, gw, gy, args);
          const CudnnLease lease(p.device);
          cudnnHandle_t h = lease.get();
          Descs d;
          make_descs(p, d, default_math(p));
          const std::optional<Choice> found = choose(p, Dir::backward_filter, h, d, x.raw_data(),
                                                     nullptr, gy.raw_data(), gw.raw_data());
          if (!found) return im2col::backward_weight(*this, gy, x, gw, args);
          const Choice& c = *found;
          GRADUS_CUDNN_CHECK("conv2d backward", cudnnSetConvolutionMathType(d.conv, c.math));
          Workspace ws(c.workspace, p.device, "conv2d backward");
          const Scale s;
          GRADUS_CUDNN_CHECK("conv2d backward",
                             cudnnConvolutionBackwardFilter(
                                 h, s.one(t), d.x, x.raw_data(), d.y, gy.raw_data(), d.conv,
                                 static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws.data(),
                                 c.workspace, s.zero(t), d.w, gw.raw_data()));
          return;
        }
#endif
        im2col::backward_weight(*this, gy, x, gw, args);
      });
    }
  }
  if (grad_bias.defined()) {
    if (grad_out.numel() == 0) {
      fill(grad_bias, 0.0);
    } else {
      // grad_bias[o] = sum over (n, h, w) of grad_out[n, o, h, w]
      const Tensor gb = grad_bias.as_strided_raw(
          {1, grad_bias.size(0), 1, 1}, {0, grad_bias.stride(0), 0, 0}, grad_bias.offset());
      reduce(ReduceOp::sum, grad_out, gb, {0, 2, 3});
    }
  }
}

}  // namespace gradus::backend::cuda
