// Reductions over arbitrary axes of a strided input, the device twin of src/backend/cpu/reduce.cpp
// (same accumulators: floats accumulate in double, integers in int64; NaN propagates through
// max / min; argmax / argmin return the first index of the extreme value, NaN counting as it).
//
// The host hands over x as [outputs, reduced] through two offset calculators. Two kernels:
//  - rows: the reduced elements of one output are read by one warp (short rows) or one block
//    (long rows, optionally split over gridDim.y);
//  - columns: when the innermost kept axis is x's contiguous one (e.g. summing [N, D] over N),
//    32 adjacent outputs are reduced together so every load is coalesced; rows split over
//    threadIdx.y and gridDim.y.
// Split problems write partial states to a workspace and a finishing kernel merges them in order.
#include <cmath>

#include "backend/cuda/common.cuh"

namespace gradus::backend::cuda {
namespace {

constexpr int kColBlockX = 32, kColBlockY = 8;
constexpr int kRowThreads = 256;
constexpr int64_t kWarpRowLimit = 1024;  // rows up to this length get one warp each

// ------------------------------------------------------------------------------ accumulators
// State, init(), add(state, value, reduced_index), merge(state, other), finish(state, count).
// merge is commutative (ties broken by index), since warp trees merge in any order.
template <typename V>
struct SumAcc {
  using State = V;
  __device__ State init() const { return V(0); }
  __device__ void add(State& s, V v, int64_t) const { s += v; }
  __device__ void merge(State& a, const State& b) const { a += b; }
  __device__ V finish(const State& s, int64_t) const { return s; }
};
template <typename V>
struct MeanAcc : SumAcc<V> {
  __device__ double finish(const V& s, int64_t count) const {
    return static_cast<double>(s) / static_cast<double>(count);
  }
};
template <typename V>
struct SumSquaresAcc : SumAcc<V> {
  __device__ void add(V& s, V v, int64_t) const { s += v * v; }
};
template <typename V>
struct ProdAcc {
  using State = V;
  __device__ State init() const { return V(1); }
  __device__ void add(State& s, V v, int64_t) const { s *= v; }
  __device__ void merge(State& a, const State& b) const { a *= b; }
  __device__ V finish(const State& s, int64_t) const { return s; }
};
template <typename V, bool kMax>
struct ExtremumAcc {
  using State = V;
  __device__ State init() const {
    if constexpr (std::is_floating_point_v<V>) {
      return kMax ? -INFINITY : INFINITY;
    } else {
      return kMax ? INT64_MIN : INT64_MAX;
    }
  }
  __device__ void add(State& s, V v, int64_t) const {
    if (v != v)
      s = v;
    else if (s == s && (kMax ? v > s : v < s))
      s = v;
  }
  __device__ void merge(State& a, const State& b) const { add(a, b, 0); }
  __device__ V finish(const State& s, int64_t) const { return s; }
};
template <typename V, bool kMax>
struct ArgAcc {
  struct State {
    V v;
    int64_t i;
  };
  __device__ static bool better(V v, V cur) {
    return (kMax ? v > cur : v < cur) || (v != v && cur == cur);
  }
  __device__ State init() const { return {V(0), -1}; }
  __device__ void add(State& s, V v, int64_t idx) const {
    if (s.i < 0 || better(v, s.v)) s = {v, idx};
  }
  __device__ void merge(State& a, const State& b) const {
    if (b.i < 0) return;
    if (a.i < 0 || better(b.v, a.v)) {
      a = b;
    } else if (!better(a.v, b.v) && b.i < a.i) {  // equal (or both NaN): first index wins
      a = b;
    }
  }
  __device__ int64_t finish(const State& s, int64_t) const { return s.i < 0 ? 0 : s.i; }
};
struct LogSumExpAcc {
  struct State {
    double m, s;
  };
  __device__ State init() const { return {-INFINITY, 0.0}; }
  __device__ void add(State& st, double v, int64_t) const {
    if (isnan(st.m)) return;
    if (isnan(v)) {
      st.m = v;
    } else if (v == -INFINITY || (isinf(st.m) && st.m > 0)) {
      return;
    } else if (v > st.m) {
      st.s = st.s * exp(st.m - v) + 1.0;
      st.m = v;
    } else {
      st.s += exp(v - st.m);
    }
  }
  __device__ void merge(State& a, const State& b) const {
    if (isnan(a.m) || b.m == -INFINITY) return;
    if (isnan(b.m) || a.m == -INFINITY) {
      a = b;
    } else if (isinf(a.m) || isinf(b.m)) {
      a.m = INFINITY;
    } else {
      const double m = fmax(a.m, b.m);
      a.s = a.s * exp(a.m - m) + b.s * exp(b.m - m);
      a.m = m;
    }
  }
  __device__ double finish(const State& st, int64_t) const {
    return isnan(st.m) || isinf(st.m) ? st.m : st.m + log(st.s);
  }
};
template <typename V, bool kAny>
struct AnyAllAcc {
  using State = int32_t;  // shuffled as a word
  __device__ State init() const { return kAny ? 0 : 1; }
  __device__ void add(State& s, V v, int64_t) const {
    s = kAny ? (s || v != V(0)) : (s && v != V(0));
  }
  __device__ void merge(State& a, const State& b) const { a = kAny ? (a || b) : (a && b); }
  __device__ bool finish(const State& s, int64_t) const { return s != 0; }
};

// ------------------------------------------------------------------------------ helpers
template <typename S>
__device__ __forceinline__ S shfl_xor_state(const S& s, int mask) {
  constexpr int kWords = (sizeof(S) + 3) / 4;
  uint32_t w[kWords] = {};
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int i = 0; i < kWords; ++i) w[i] = __shfl_xor_sync(0xffffffffu, w[i], mask);
  S r;
  memcpy(&r, w, sizeof(S));
  return r;
}

template <typename Acc, typename S>
__device__ __forceinline__ S warp_merge(const Acc& acc, S s) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    const S o = shfl_xor_state(s, m);
    acc.merge(s, o);
  }
  return s;
}

// Input element as the accumulator's value type. Integer inputs share one instantiation: their
// dtype is read at run time.
template <typename T, typename V>
__device__ __forceinline__ V load_value(const void* base, int64_t off, DType dt) {
  if constexpr (std::is_same_v<T, void>) {
    return load_dyn<V>(static_cast<const char*>(base) + off * dtype_bytes(dt), dt);
  } else {
    return convert<V>(static_cast<const T*>(base)[off]);
  }
}

struct KernelArgs {
  OffsetCalc<2> kept;  // operand 0: out, 1: x
  OffsetCalc<1> red;   // x
  const void* x;
  void* out;
  DType in_dtype, out_dtype;
  uint32_t outputs;
  uint32_t reduced;
  uint32_t inner;  // columns mode: size of the innermost kept axis
  int splits;
  bool warp_mode;
  void* partial;  // [outputs, splits] states when splits > 1
};

template <typename Acc>
__device__ __forceinline__ void write_result(const Acc& acc, const KernelArgs& a, uint32_t o,
                                             const typename Acc::State& s) {
  int64_t off[2];
  a.kept.get(o, off);
  store_dyn(static_cast<char*>(a.out) + off[0] * dtype_bytes(a.out_dtype), a.out_dtype,
            acc.finish(s, static_cast<int64_t>(a.reduced)));
}

// ------------------------------------------------------------------------------ kernels
template <typename T, typename V, typename Acc>
__global__ void __launch_bounds__(kRowThreads) reduce_rows(KernelArgs a, Acc acc) {
  using State = typename Acc::State;
  __shared__ State smem[kRowThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint32_t o;
  uint32_t begin, end, step, first;
  if (a.warp_mode) {
    o = blockIdx.x * (kRowThreads / 32) + warp;
    if (o >= a.outputs) return;
    begin = 0;
    end = a.reduced;
    first = lane;
    step = 32;
  } else {
    o = blockIdx.x;
    const uint32_t chunk = (a.reduced + a.splits - 1) / a.splits;
    begin = blockIdx.y * chunk;
    end = min(a.reduced, begin + chunk);
    first = threadIdx.x;
    step = blockDim.x;
  }
  int64_t koff[2];
  a.kept.get(o, koff);
  State s = acc.init();
  for (uint32_t r = begin + first; r < end; r += step) {
    int64_t roff[1];
    a.red.get(r, roff);
    acc.add(s, load_value<T, V>(a.x, koff[1] + roff[0], a.in_dtype), r);
  }
  s = warp_merge(acc, s);
  if (!a.warp_mode) {
    if (lane == 0) smem[warp] = s;
    __syncthreads();
    if (warp != 0) return;
    s = lane < kRowThreads / 32 ? smem[lane] : acc.init();
    s = warp_merge(acc, s);
  }
  if (lane != 0) return;
  if (a.splits == 1) {
    write_result(acc, a, o, s);
  } else {
    static_cast<State*>(a.partial)[static_cast<int64_t>(o) * a.splits + blockIdx.y] = s;
  }
}

template <typename T, typename V, typename Acc>
__global__ void __launch_bounds__(kColBlockX* kColBlockY) reduce_columns(KernelArgs a, Acc acc) {
  using State = typename Acc::State;
  __shared__ State smem[kColBlockY][kColBlockX];
  const uint32_t blocks_per_row = (a.inner + kColBlockX - 1) / kColBlockX;
  const uint32_t outer = blockIdx.x / blocks_per_row;
  const uint32_t col = (blockIdx.x % blocks_per_row) * kColBlockX + threadIdx.x;
  const bool valid = col < a.inner;
  const uint32_t o = outer * a.inner + col;
  const uint32_t chunk = (a.reduced + a.splits - 1) / a.splits;
  const uint32_t begin = blockIdx.y * chunk, end = min(a.reduced, begin + chunk);
  State s = acc.init();
  if (valid) {
    int64_t koff[2];
    a.kept.get(o, koff);
    for (uint32_t r = begin + threadIdx.y; r < end; r += kColBlockY) {
      int64_t roff[1];
      a.red.get(r, roff);
      acc.add(s, load_value<T, V>(a.x, koff[1] + roff[0], a.in_dtype), r);
    }
  }
  smem[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || !valid) return;
  for (int y = 1; y < kColBlockY; ++y) acc.merge(s, smem[y][threadIdx.x]);
  if (a.splits == 1) {
    write_result(acc, a, o, s);
  } else {
    static_cast<State*>(a.partial)[static_cast<int64_t>(o) * a.splits + blockIdx.y] = s;
  }
}

template <typename Acc>
__global__ void __launch_bounds__(kThreads) reduce_finish(KernelArgs a, Acc acc) {
  using State = typename Acc::State;
  const uint32_t o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= a.outputs) return;
  const State* p = static_cast<const State*>(a.partial) + static_cast<int64_t>(o) * a.splits;
  State s = p[0];
  for (int i = 1; i < a.splits; ++i) acc.merge(s, p[i]);
  write_result(acc, a, o, s);
}

// ------------------------------------------------------------------------------ planning
struct Plan {
  bool columns = false;
  bool warp_mode = false;
  int splits = 1;
  int64_t groups = 0;  // blocks along x
};

Plan make_plan(const ReduceProblem& p, int sms) {
  Plan plan;
  const int64_t target_blocks = static_cast<int64_t>(sms > 0 ? sms : 132) * 4;
  const int64_t O = p.outputs, R = p.count;
  plan.columns = p.kept.ndim > 0 && p.reduced.ndim > 0 && p.kept.strides[1][p.kept.ndim - 1] == 1 &&
                 p.reduced.strides[0][p.reduced.ndim - 1] != 1;
  auto clamp_splits = [](int64_t s, int64_t max_useful) {
    s = std::min<int64_t>(s, max_useful);
    s = std::min<int64_t>(s, 65535);
    return static_cast<int>(std::max<int64_t>(s, 1));
  };
  if (plan.columns) {
    const int64_t inner = p.kept.sizes[p.kept.ndim - 1];
    plan.groups = (O / inner) * ((inner + kColBlockX - 1) / kColBlockX);
    plan.splits = clamp_splits(target_blocks / std::max<int64_t>(plan.groups, 1),
                               (R + kColBlockY * 16 - 1) / (kColBlockY * 16));
  } else if (R <= kWarpRowLimit) {
    plan.warp_mode = true;
    plan.groups = (O + kRowThreads / 32 - 1) / (kRowThreads / 32);
  } else {
    plan.groups = O;
    plan.splits = clamp_splits(target_blocks / std::max<int64_t>(O, 1),
                               (R + kRowThreads * 16 - 1) / (kRowThreads * 16));
  }
  return plan;
}

template <typename Acc>
size_t state_bytes() {
  return sizeof(typename Acc::State);
}

template <typename T, typename V, typename Acc>
void run(const Acc& acc, const ReduceProblem& p, void* workspace, int sms, cudaStream_t stream) {
  const Plan plan = make_plan(p, sms);
  KernelArgs a{};
  a.kept = make_offset_calc(p.kept);
  {
    const int which[1] = {0};
    a.red = make_offset_calc<1, 1>(p.reduced, which);
  }
  a.x = p.in;
  a.out = p.out;
  a.in_dtype = p.in_dtype;
  a.out_dtype = p.out_dtype;
  a.outputs = static_cast<uint32_t>(p.outputs);
  a.reduced = static_cast<uint32_t>(p.count);
  a.inner = plan.columns ? static_cast<uint32_t>(p.kept.sizes[p.kept.ndim - 1]) : 1;
  a.splits = plan.splits;
  a.warp_mode = plan.warp_mode;
  a.partial = workspace;
  const dim3 grid(static_cast<unsigned>(plan.groups), static_cast<unsigned>(plan.splits));
  if (plan.columns) {
    reduce_columns<T, V, Acc><<<grid, dim3(kColBlockX, kColBlockY), 0, stream>>>(a, acc);
  } else {
    reduce_rows<T, V, Acc><<<grid, kRowThreads, 0, stream>>>(a, acc);
  }
  GRADUS_CUDA_CHECK_LAUNCH("reduce");
  if (plan.splits > 1) {
    reduce_finish<Acc><<<blocks_for(p.outputs, kThreads), kThreads, 0, stream>>>(a, acc);
    GRADUS_CUDA_CHECK_LAUNCH("reduce (merge)");
  }
}

// Calls fn(acc, T, V) for the op; T = void stands for any integer input.
template <typename T, typename Fn>
void with_acc(ReduceOp op, Fn&& fn) {
  using V = std::conditional_t<std::is_same_v<T, void>, int64_t, double>;
  switch (op) {
    case ReduceOp::sum:
      return fn(SumAcc<V>{}, V{});
    case ReduceOp::mean:
      return fn(MeanAcc<V>{}, V{});
    case ReduceOp::prod:
      return fn(ProdAcc<V>{}, V{});
    case ReduceOp::max:
      return fn(ExtremumAcc<V, true>{}, V{});
    case ReduceOp::min:
      return fn(ExtremumAcc<V, false>{}, V{});
    case ReduceOp::argmax:
      return fn(ArgAcc<V, true>{}, V{});
    case ReduceOp::argmin:
      return fn(ArgAcc<V, false>{}, V{});
    case ReduceOp::sum_squares:
      return fn(SumSquaresAcc<V>{}, V{});
    case ReduceOp::logsumexp:
      return fn(LogSumExpAcc{}, double{});
    case ReduceOp::any:
      return fn(AnyAllAcc<V, true>{}, V{});
    case ReduceOp::all:
      return fn(AnyAllAcc<V, false>{}, V{});
  }
}

template <typename Fn>
void with_input_type(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32:
      return fn(float{});
    case DType::f64:
      return fn(double{});
    case DType::f16:
      return fn(f16_t{});
    case DType::bf16:
      return fn(bf16_t{});
    default:
      return fn(static_cast<void*>(nullptr));  // integers and bool
  }
}

}  // namespace

size_t reduce_workspace_bytes(ReduceOp op, const ReduceProblem& p, int multiprocessors) {
  const Plan plan = make_plan(p, multiprocessors);
  if (plan.splits <= 1) return 0;
  size_t bytes = 0;
  with_input_type(p.in_dtype, [&](auto tag) {
    using T = std::conditional_t<std::is_same_v<decltype(tag), void*>, void, decltype(tag)>;
    with_acc<T>(op, [&](auto acc, auto) { bytes = state_bytes<decltype(acc)>(); });
  });
  return bytes * static_cast<size_t>(p.outputs) * static_cast<size_t>(plan.splits);
}

void launch_reduce(ReduceOp op, const ReduceProblem& p, void* workspace, int multiprocessors,
                   cudaStream_t stream) {
  if (p.outputs == 0) return;
  with_input_type(p.in_dtype, [&](auto tag) {
    using T = std::conditional_t<std::is_same_v<decltype(tag), void*>, void, decltype(tag)>;
    with_acc<T>(op, [&](auto acc, auto v) {
      run<T, decltype(v), decltype(acc)>(acc, p, workspace, multiprocessors, stream);
    });
  });
}

}  // namespace gradus::backend::cuda
