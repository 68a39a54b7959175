// Reductions over arbitrary axes of a strided input.
//
// Plan: the kept and the reduced axes are each coalesced (size-1 axes dropped, adjacent axes with
// matching strides merged). Work is cut into tasks = (output group, chunk of the reduced range):
//  - "row" mode: a group is one output and its reduced elements are visited as strided runs
//    (a contiguous innermost reduced axis gives unit-stride, vectorised runs);
//  - "column" mode, when the innermost kept axis is the contiguous one (e.g. summing [N, D] over
//    N): a group is a block of up to kCols adjacent outputs, updated together row by row.
// Chunks of the reduced range have a fixed size, and partial results are merged in chunk order,
// so results do not depend on the thread count. Floating inputs accumulate in double, integers
// in int64.
#include <cmath>
#include <limits>

#include "backend/common/op_meta.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/loops.h"

namespace gradus::backend::cpu {
namespace {

constexpr int64_t kCols = 256;        // outputs per group in column mode
constexpr int64_t kChunk = 32768;     // reduced elements per task in row mode
constexpr int64_t kChunkRows = 2048;  // reduced rows per task in column mode

// ------------------------------------------------------------------------------ accumulators
// Each accumulator: State, init(), add(state, value, reduced_index), merge(earlier, later),
// finish(state, count) -> double / int64 / bool. `additive` ones are s += map(v) and get
// vectorised loops.
template <typename V>
struct SumAcc {
  using State = V;
  static constexpr bool additive = true;
  static V map(V v) { return v; }
  State init() const { return V(0); }
  void merge(State& a, const State& b) const { a += b; }
  V finish(const State& s, int64_t) const { return s; }
};
template <typename V>
struct MeanAcc : SumAcc<V> {
  double finish(const V& s, int64_t count) const {
    return static_cast<double>(s) / static_cast<double>(count);
  }
};
template <typename V>
struct SumSquaresAcc : SumAcc<V> {
  static V map(V v) { return v * v; }
};
template <typename V>
struct ProdAcc {
  using State = V;
  static constexpr bool additive = false;
  State init() const { return V(1); }
  void add(State& s, V v, int64_t) const { s *= v; }
  void merge(State& a, const State& b) const { a *= b; }
  V finish(const State& s, int64_t) const { return s; }
};
// The type comparisons run in: the input's own float type (exact, and twice the vector width of
// double), else the accumulator type.
template <typename T, typename V>
using CompareType = std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, double>, T, V>;

template <typename W>
constexpr W lowest_of() {
  return std::numeric_limits<W>::has_infinity ? -std::numeric_limits<W>::infinity()
                                              : std::numeric_limits<W>::lowest();
}
template <typename W>
constexpr W highest_of() {
  return std::numeric_limits<W>::has_infinity ? std::numeric_limits<W>::infinity()
                                              : std::numeric_limits<W>::max();
}

// Vectorised extreme of a contiguous run; `nan` reports whether any element was NaN. (The NaN
// flag must be an int: GCC 12 does not vectorise a bool || reduction.)
template <bool kMax, typename W, typename T>
W run_extreme(const T* p, int64_t n, bool& nan) {
  W best = kMax ? lowest_of<W>() : highest_of<W>();
  int32_t any = 0;
  if constexpr (kMax) {
#pragma omp simd reduction(max : best) reduction(| : any)
    for (int64_t i = 0; i < n; ++i) {
      const W v = convert<W>(p[i]);
      any |= v != v;
      best = v > best ? v : best;
    }
  } else {
#pragma omp simd reduction(min : best) reduction(| : any)
    for (int64_t i = 0; i < n; ++i) {
      const W v = convert<W>(p[i]);
      any |= v != v;
      best = v < best ? v : best;
    }
  }
  nan = any != 0;
  return best;
}

// max / min propagate NaN.
template <typename V, bool kMax>
struct ExtremumAcc {
  using State = V;
  static constexpr bool additive = false;
  State init() const { return kMax ? lowest_of<V>() : highest_of<V>(); }
  // Branch-free so the column loop vectorises: a NaN state sticks, a NaN value wins.
  void add(State& s, V v, int64_t) const {
    s = s != s ? s : ((v != v || (kMax ? v > s : v < s)) ? v : s);
  }
  void merge(State& a, const State& b) const { add(a, b, 0); }
  V finish(const State& s, int64_t) const { return s; }
  template <typename T>
  void add_contiguous(State& s, const T* p, int64_t n, int64_t) const {
    bool nan;
    const auto best = run_extreme<kMax, CompareType<T, V>>(p, n, nan);
    add(s, nan ? std::numeric_limits<V>::quiet_NaN() : static_cast<V>(best), 0);
  }
};
// First index of the extreme value; NaN counts as the extreme (like PyTorch).
template <typename V, bool kMax>
struct ArgAcc {
  struct State {
    V v;
    int64_t i;
  };
  static constexpr bool additive = false;
  static bool better(V v, V cur) { return (kMax ? v > cur : v < cur) || (v != v && cur == cur); }
  State init() const { return {V(0), -1}; }
  void add(State& s, V v, int64_t idx) const {
    if (s.i < 0 || better(v, s.v)) s = {v, idx};
  }
  void merge(State& a, const State& b) const {
    if (b.i >= 0 && (a.i < 0 || better(b.v, a.v))) a = b;
  }
  int64_t finish(const State& s, int64_t) const { return s.i < 0 ? 0 : s.i; }
  // A vectorised pass for the extreme value, then a scan for its first position.
  template <typename T>
  void add_contiguous(State& s, const T* p, int64_t n, int64_t idx0) const {
    if (n <= 0) return;
    using W = CompareType<T, V>;
    bool nan;
    const W best = run_extreme<kMax, W>(p, n, nan);
    int64_t pos = 0;
    while (pos < n - 1) {
      const W v = convert<W>(p[pos]);
      if (nan ? v != v : v == best) break;
      ++pos;
    }
    add(s, nan ? std::numeric_limits<V>::quiet_NaN() : static_cast<V>(best), idx0 + pos);
  }
};
// Streaming log-sum-exp: (max so far, sum of exp(x - max)).
struct LogSumExpAcc {
  struct State {
    double m, s;
  };
  static constexpr bool additive = false;
  State init() const { return {-std::numeric_limits<double>::infinity(), 0.0}; }
  void add(State& st, double v, int64_t) const {
    if (std::isnan(st.m)) return;
    if (std::isnan(v)) {
      st.m = v;
    } else if (v == -std::numeric_limits<double>::infinity() || (std::isinf(st.m) && st.m > 0)) {
      return;
    } else if (v > st.m) {
      st.s = st.s * std::exp(st.m - v) + 1.0;
      st.m = v;
    } else {
      st.s += std::exp(v - st.m);
    }
  }
  void merge(State& a, const State& b) const {
    if (std::isnan(a.m) || b.m == -std::numeric_limits<double>::infinity()) return;
    if (std::isnan(b.m) || a.m == -std::numeric_limits<double>::infinity()) {
      a = b;
    } else if (std::isinf(a.m) || std::isinf(b.m)) {
      a.m = std::numeric_limits<double>::infinity();
    } else {
      const double m = std::max(a.m, b.m);
      a.s = a.s * std::exp(a.m - m) + b.s * std::exp(b.m - m);
      a.m = m;
    }
  }
  double finish(const State& st, int64_t) const {
    return std::isnan(st.m) || std::isinf(st.m) ? st.m : st.m + std::log(st.s);
  }
};
template <typename V, bool kAny>
struct AnyAllAcc {
  // A byte, not bool: the chunks' partial states live in a std::vector<State>, and
  // std::vector<bool> packs them into shared words that concurrent chunks would race on (seen as
  // a wrong `all` over 2M elements with 16 threads).
  using State = uint8_t;
  static constexpr bool additive = false;
  State init() const { return kAny ? 0 : 1; }
  void add(State& s, V v, int64_t) const { s = kAny ? (s || v != V(0)) : (s && v != V(0)); }
  void merge(State& a, const State& b) const { a = kAny ? (a || b) : (a && b); }
  bool finish(const State& s, int64_t) const { return s != 0; }
};

// ------------------------------------------------------------------------------------- plan
using common::coalesce_axes;
using Axis = common::ReduceAxis;  // size, input stride, output stride (elements)

struct Plan {
  std::vector<Axis> kept, red;
  int64_t outputs = 1, reduced = 1;
  bool columns = false;
};

// Input/output element offsets of kept index o (row-major over `kept`, optionally skipping the
// innermost axis).
void kept_offsets(const std::vector<Axis>& kept, size_t ndims, int64_t o, int64_t& xoff,
                  int64_t& ooff) {
  xoff = ooff = 0;
  for (size_t d = ndims; d-- > 0;) {
    const int64_t i = o % kept[d].size;
    o /= kept[d].size;
    xoff += i * kept[d].xs;
    ooff += i * kept[d].os;
  }
}

template <typename R>
void store_one(char* p, DType dt, R v) {
  dispatch_dtype(dt, [&](auto tag) {
    using T = decltype(tag);
    *reinterpret_cast<T*>(p) = convert<T>(v);
  });
}

// ----------------------------------------------------------------------------------- engine
template <typename T, typename V, typename Acc>
void run_reduce(const Acc& acc, const Tensor& x, const Tensor& out, const Plan& plan) {
  using State = typename Acc::State;
  const T* xp = static_cast<const T*>(x.raw_data());
  char* op = static_cast<char*>(out.raw_data());
  const DType odt = out.dtype();
  const int64_t osize = static_cast<int64_t>(out.element_size());
  const int64_t R = plan.reduced;

  StridedLayout<1> red;
  for (const Axis& a : plan.red) {
    red.sizes.push_back(a.size);
    red.strides.push_back({a.xs * static_cast<int64_t>(sizeof(T))});
  }
  red.numel = R;

  // Visits reduced elements [begin, end) of the group starting at x element `xoff`, calling
  // run(const T* p, stride_elems, n, first_reduced_index).
  auto visit = [&](int64_t xoff, int64_t begin, int64_t end, const auto& run) {
    std::array<char*, 1> base{reinterpret_cast<char*>(const_cast<T*>(xp + xoff))};
    iterate_runs<1>(
        red, base, begin, end, [&](char* const* p, const int64_t* s, int64_t n, int64_t idx) {
          run(reinterpret_cast<const T*>(p[0]), s[0] / static_cast<int64_t>(sizeof(T)), n, idx);
        });
  };

  const int64_t width = plan.columns ? kCols : 1;
  const int64_t inner = plan.columns ? plan.kept.back().size : 1;
  const int64_t blocks = plan.columns ? (inner + kCols - 1) / kCols : 1;
  const int64_t groups = plan.outputs / inner * blocks;
  const int64_t chunk = plan.columns ? kChunkRows : kChunk;
  const int64_t nchunks = (R + chunk - 1) / chunk;
  const int64_t tasks = groups * nchunks;
  const size_t outer_dims = plan.kept.size() - (plan.columns ? 1 : 0);
  static_assert(!std::is_same_v<State, bool>, "std::vector<bool> would share words between chunks");
  std::vector<State> partial(nchunks > 1 ? static_cast<size_t>(tasks * width) : 0);

  // Locates group g: x/out offsets of its first output and how many outputs it has.
  auto locate = [&](int64_t g, int64_t& xoff, int64_t& ooff, int64_t& w) {
    const int64_t b = g % blocks;
    kept_offsets(plan.kept, outer_dims, g / blocks, xoff, ooff);
    w = plan.columns ? std::min(kCols, inner - b * kCols) : 1;
    if (plan.columns) {
      xoff += b * kCols;  // the innermost kept axis has input stride 1
      ooff += b * kCols * plan.kept.back().os;
    }
  };
  auto write = [&](int64_t ooff, int64_t j, const State& s) {
    const int64_t os = plan.columns ? plan.kept.back().os : 0;
    store_one(op + (ooff + j * os) * osize, odt, acc.finish(s, R));
  };

  const int64_t per_task = std::min(R, chunk) * width;
  parallel_for(tasks, std::max<int64_t>(1, kGrain / std::max<int64_t>(per_task, 1)),
               [&](int64_t t0, int64_t t1) {
                 State st[kCols];
                 for (int64_t t = t0; t < t1; ++t) {
                   const int64_t g = t / nchunks, c = t % nchunks;
                   int64_t xoff, ooff, w;
                   locate(g, xoff, ooff, w);
                   for (int64_t j = 0; j < w; ++j) st[j] = acc.init();
                   const int64_t begin = c * chunk, end = std::min(R, begin + chunk);
                   if (plan.columns) {
                     visit(xoff, begin, end, [&](const T* p, int64_t s, int64_t n, int64_t idx) {
                       for (int64_t r = 0; r < n; ++r) {
                         const T* row = p + r * s;
                         if constexpr (Acc::additive) {
#pragma omp simd
                           for (int64_t j = 0; j < w; ++j) st[j] += Acc::map(convert<V>(row[j]));
                         } else {
#pragma omp simd  // columns are independent
                           for (int64_t j = 0; j < w; ++j)
                             acc.add(st[j], convert<V>(row[j]), idx + r);
                         }
                       }
                     });
                   } else {
                     visit(xoff, begin, end, [&](const T* p, int64_t s, int64_t n, int64_t idx) {
                       if constexpr (Acc::additive) {
                         V sum = 0;
                         if (s == 1) {
#pragma omp simd reduction(+ : sum)
                           for (int64_t i = 0; i < n; ++i) sum += Acc::map(convert<V>(p[i]));
                         } else {
                           for (int64_t i = 0; i < n; ++i) sum += Acc::map(convert<V>(p[i * s]));
                         }
                         st[0] += sum;
                       } else if constexpr (requires { acc.add_contiguous(st[0], p, n, idx); }) {
                         if (s == 1) {
                           acc.add_contiguous(st[0], p, n, idx);
                         } else {
                           for (int64_t i = 0; i < n; ++i)
                             acc.add(st[0], convert<V>(p[i * s]), idx + i);
                         }
                       } else {
                         for (int64_t i = 0; i < n; ++i)
                           acc.add(st[0], convert<V>(p[i * s]), idx + i);
                       }
                     });
                   }
                   if (nchunks == 1) {
                     for (int64_t j = 0; j < w; ++j) write(ooff, j, st[j]);
                   } else {
                     for (int64_t j = 0; j < w; ++j) partial[t * width + j] = st[j];
                   }
                 }
               });
  if (nchunks == 1) return;
  // Merge the chunks of each group in order.
  parallel_for(groups, std::max<int64_t>(1, kGrain / (nchunks * width)),
               [&](int64_t g0, int64_t g1) {
                 for (int64_t g = g0; g < g1; ++g) {
                   int64_t xoff, ooff, w;
                   locate(g, xoff, ooff, w);
                   for (int64_t j = 0; j < w; ++j) {
                     State s = partial[(g * nchunks) * width + j];
                     for (int64_t c = 1; c < nchunks; ++c) {
                       acc.merge(s, partial[(g * nchunks + c) * width + j]);
                     }
                     write(ooff, j, s);
                   }
                 }
               });
}

template <typename T>
void dispatch_acc(ReduceOp op, const Tensor& x, const Tensor& out, const Plan& plan) {
  using V = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  switch (op) {
    case ReduceOp::sum:
      return run_reduce<T, V>(SumAcc<V>{}, x, out, plan);
    case ReduceOp::mean:
      return run_reduce<T, V>(MeanAcc<V>{}, x, out, plan);
    case ReduceOp::prod:
      return run_reduce<T, V>(ProdAcc<V>{}, x, out, plan);
    case ReduceOp::max:
      return run_reduce<T, V>(ExtremumAcc<V, true>{}, x, out, plan);
    case ReduceOp::min:
      return run_reduce<T, V>(ExtremumAcc<V, false>{}, x, out, plan);
    case ReduceOp::argmax:
      return run_reduce<T, V>(ArgAcc<V, true>{}, x, out, plan);
    case ReduceOp::argmin:
      return run_reduce<T, V>(ArgAcc<V, false>{}, x, out, plan);
    case ReduceOp::sum_squares:
      return run_reduce<T, V>(SumSquaresAcc<V>{}, x, out, plan);
    case ReduceOp::logsumexp:
      return run_reduce<T, double>(LogSumExpAcc{}, x, out, plan);
    case ReduceOp::any:
      return run_reduce<T, V>(AnyAllAcc<V, true>{}, x, out, plan);
    case ReduceOp::all:
      return run_reduce<T, V>(AnyAllAcc<V, false>{}, x, out, plan);
  }
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out,
                        const std::vector<int64_t>& dims) {
  if (out.numel() == 0) return;
  if (x.numel() == 0) {
    fill(out, common::empty_reduction_value(op));
    return;
  }
  std::vector<bool> is_reduced(static_cast<size_t>(x.dim()), false);
  for (int64_t d : dims) is_reduced[static_cast<size_t>(d)] = true;
  std::vector<Axis> kept, red;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const Axis a{x.size(d), x.stride(d), is_reduced[d] ? 0 : out.stride(d)};
    (is_reduced[d] ? red : kept).push_back(a);
  }
  Plan plan;
  plan.kept = coalesce_axes(kept);
  plan.red = coalesce_axes(red);
  for (const Axis& a : plan.kept) plan.outputs *= a.size;
  for (const Axis& a : plan.red) plan.reduced *= a.size;
  plan.columns = !plan.kept.empty() && !plan.red.empty() && plan.kept.back().xs == 1 &&
                 plan.red.back().xs != 1;
  dispatch_dtype(x.dtype(), [&](auto tag) { dispatch_acc<decltype(tag)>(op, x, out, plan); });
}

}  // namespace gradus::backend::cpu
