// The harness machinery: drawing and building inputs, comparisons, tolerances, poisoned memory.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <sstream>

#include "ops/harness.h"

namespace gradus::harness {

OpCase op(std::string name, std::vector<In> inputs, OpFn1 fn, std::vector<DType> dtypes) {
  OpCase c;
  c.name = std::move(name);
  c.inputs = std::move(inputs);
  c.fn = [fn = std::move(fn)](const Inputs& x) { return std::vector<Tensor>{fn(x)}; };
  c.dtypes = std::move(dtypes);
  return c;
}

OpCase opn(std::string name, std::vector<In> inputs, OpFn fn, std::vector<DType> dtypes) {
  OpCase c;
  c.name = std::move(name);
  c.inputs = std::move(inputs);
  c.fn = std::move(fn);
  c.dtypes = std::move(dtypes);
  return c;
}

const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> all;
    for (auto* table : {&elementwise_cases, &reduction_cases, &linalg_shape_cases, &nn_cases}) {
      for (OpCase& c : (*table)()) all.push_back(std::move(c));
    }
    // Duplicate names would make two gtest instances collide; fail loudly at startup.
    std::set<std::string> names;
    for (const OpCase& c : all) {
      if (!names.insert(c.name).second) throw ValueError("harness: duplicate case " + c.name);
    }
    return all;
  }();
  return cases;
}

namespace {

bool floating_kind(Kind k) {
  return k == Kind::floating || k == Kind::ties || k == Kind::special;
}

DType input_dtype(const In& in, DType test_dtype) {
  switch (in.kind) {
    case Kind::index:
      return DType::i64;
    case Kind::boolean:
      return DType::boolean;
    default:
      return test_dtype;
  }
}

Tensor apply_layout(const Tensor& base, const In& in) {
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  switch (in.layout) {
    case Layout::contiguous:
      return base;
    case Layout::transposed:
      return rank >= 2 ? base.transpose(-2, -1) : base;
    case Layout::strided:
      return rank >= 1 ? base.slice(-1, 1, base.size(-1), 2) : base;
    case Layout::expanded:
      return rank >= 1 ? base.expand(in.shape) : base;
    case Layout::channels_last: {
      if (rank < 3) return base;
      std::vector<int64_t> order = {0, rank - 1};
      for (int64_t d = 1; d < rank - 1; ++d) order.push_back(d);
      return base.permute(order);
    }
  }
  return base;
}

}  // namespace

Shape base_shape(const In& in) {
  Shape s = in.shape;
  const size_t rank = s.size();
  switch (in.layout) {
    case Layout::contiguous:
      break;
    case Layout::transposed:
      if (rank >= 2) std::swap(s[rank - 1], s[rank - 2]);
      break;
    case Layout::strided:
      if (rank >= 1) s[rank - 1] = 2 * s[rank - 1] + 1;
      break;
    case Layout::expanded:
      if (rank >= 1) s[0] = 1;
      break;
    case Layout::channels_last:
      if (rank >= 3) {
        const int64_t c = s[1];
        s.erase(s.begin() + 1);
        s.push_back(c);
      }
      break;
  }
  return s;
}

std::vector<std::vector<double>> draw_inputs(const OpCase& c, uint64_t seed, DType dtype) {
  // The floating inputs of a case share one lattice: input i of n takes the points at offset
  // 2^-(n + 1 - i) of a pitch. Values of different inputs then differ by at least 2^-(n + 1)
  // pitch, so the gradcheck's +-1e-6 steps never straddle a tie between inputs either
  // (maximum(a, b) with a[k] within 1e-6 of b[k]); and as an earlier input's offset has a larger
  // power-of-two denominator than a later one's, a = m * b has no solution for integer m (the
  // jumps of fmod / remainder). The pitch is at most an eighth of any input's grid step, so
  // snapping keeps the spacing described below.
  double pitch = 0x1p-10;
  for (const In& in : c.inputs) {
    const int64_t n = shape_numel(base_shape(in));
    if (in.kind == Kind::floating && n > 0) {
      pitch = std::min(pitch, (in.hi - in.lo) / static_cast<double>(n) / 8);
    }
  }
  const int inputs = static_cast<int>(c.inputs.size());
  std::vector<std::vector<double>> all;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const In& in = c.inputs[i];
    std::mt19937_64 rng(seed + 0x9E3779B97F4A7C15ull * (i + 1));
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::vector<double> v(static_cast<size_t>(shape_numel(base_shape(in))));
    const bool integral = !is_floating(dtype);
    // Floating values are a shuffled, jittered grid over [lo, hi), snapped to the lattice above:
    // uniform over the domain, yet any two are at least a quarter grid step apart (and an eighth
    // of a step from the domain's centre), so the gradcheck never straddles a tie of
    // max/min/pooling or the kink of relu/abs.
    std::vector<size_t> slot(v.size());
    for (size_t k = 0; k < slot.size(); ++k) slot[k] = k;
    std::shuffle(slot.begin(), slot.end(), rng);
    for (size_t k = 0; k < v.size(); ++k) {
      double& x = v[k];
      const double u = unit(rng);
      switch (in.kind) {
        case Kind::floating:
          if (integral) {
            x = std::floor(5 * in.lo + u * 5 * (in.hi - in.lo));
          } else {
            const double cell =
                (static_cast<double>(slot[k]) + 0.25 + 0.5 * u) / static_cast<double>(v.size());
            x = in.lo + cell * (in.hi - in.lo);
            const double offset = std::ldexp(1.0, static_cast<int>(i) - inputs - 1);
            x = (std::floor(x / pitch) + offset) * pitch;
          }
          break;
        case Kind::ties:
          x = in.lo + u * (in.hi - in.lo);
          x = integral ? std::round(x) : std::round(2 * x) / 2;
          break;
        case Kind::special: {
          const double r = unit(rng);
          x = r < 0.1   ? std::numeric_limits<double>::quiet_NaN()
              : r < 0.2 ? std::numeric_limits<double>::infinity()
              : r < 0.3 ? -std::numeric_limits<double>::infinity()
                        : in.lo + u * (in.hi - in.lo);
          break;
        }
        case Kind::index:
          x = std::min(std::floor(in.lo + u * (in.hi - in.lo)), in.hi - 1);
          break;
        case Kind::boolean:
          x = u < 0.5 ? 1.0 : 0.0;
          break;
      }
    }
    all.push_back(std::move(v));
  }
  return all;
}

Built build_inputs(const OpCase& c, const std::vector<std::vector<double>>& base, DType dtype,
                   Device device, bool requires_grad, bool reference) {
  Built b;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const In& in = c.inputs[i];
    const DType t = input_dtype(in, dtype);
    Tensor leaf = tensor(base[i], base_shape(in), {t, Device::cpu()});
    if (reference) {
      // Rounded through the test dtype above; the reference computes in float64 on the CPU.
      if (floating_kind(in.kind)) leaf = leaf.to(DType::f64);
    } else {
      leaf = leaf.to(device);
    }
    leaf = leaf.detach();
    if (requires_grad && in.grad && floating_kind(in.kind) && is_floating(leaf.dtype())) {
      leaf.set_requires_grad(true);
    }
    Tensor view = apply_layout(leaf, in);
    // The reference runs on contiguous inputs, so a non-contiguous test input checks the kernel's
    // strided path against its contiguous one.
    if (reference) view = view.contiguous();
    b.leaves.push_back(leaf);
    b.inputs.push_back(view);
  }
  return b;
}

size_t num_diff_outputs(const OpCase& c, const std::vector<Tensor>& outs) {
  if (c.diff_outputs >= 0) return std::min(outs.size(), static_cast<size_t>(c.diff_outputs));
  return outs.size();
}

namespace {

std::string index_str(const Shape& shape, size_t flat) {
  std::vector<int64_t> idx(shape.size());
  int64_t rem = static_cast<int64_t>(flat);
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t s = std::max<int64_t>(shape[d], 1);
    idx[d] = rem % s;
    rem /= s;
  }
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
  os << "]";
  return os.str();
}

}  // namespace

::testing::AssertionResult compare(const Tensor& actual, const Tensor& expected, double rtol,
                                   double atol, const std::string& what) {
  if (!actual.defined() || !expected.defined()) {
    return ::testing::AssertionFailure()
           << what << ": " << (actual.defined() ? "expected" : "actual") << " is undefined";
  }
  if (actual.sizes() != expected.sizes()) {
    return ::testing::AssertionFailure() << what << ": shape " << shape_str(actual.sizes())
                                         << ", expected " << shape_str(expected.sizes());
  }
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok;
    if (std::isnan(e[i])) {
      ok = std::isnan(a[i]);
    } else if (std::isinf(e[i])) {
      ok = a[i] == e[i];
    } else {
      ok = std::abs(a[i] - e[i]) <= atol + rtol * std::abs(e[i]);  // false for NaN a[i]
    }
    if (!ok) {
      ++bad;
      const double excess = std::isnan(a[i]) || std::isnan(e[i])
                                ? std::numeric_limits<double>::infinity()
                                : std::abs(a[i] - e[i]) / (atol + rtol * std::abs(e[i]));
      if (excess > worst_excess) worst_excess = excess, worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  auto msg = ::testing::AssertionFailure();
  msg << what << " " << shape_str(actual.sizes()) << " " << dtype_name(actual.dtype()) << ": "
      << bad << " of " << a.size() << " elements out of tolerance (rtol " << rtol << ", atol "
      << atol << "); worst at " << index_str(actual.sizes(), worst) << ": got " << a[worst]
      << ", expected " << e[worst];
  if (std::isnan(a[worst]) && !std::isnan(e[worst])) {
    msg << " (NaN where the reference has a value: an element the kernel did not write?)";
  }
  return msg;
}

::testing::AssertionResult identical(const Tensor& a, const Tensor& b, const std::string& what) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) {
    return ::testing::AssertionFailure() << what << ": shape/dtype changed between runs";
  }
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != y[i] && !(std::isnan(x[i]) && std::isnan(y[i]))) {
      return ::testing::AssertionFailure()
             << what << ": two runs on the same inputs differ at " << index_str(a.sizes(), i)
             << ": " << x[i] << " vs " << y[i] << " (nondeterministic or reads unwritten memory)";
    }
  }
  return ::testing::AssertionSuccess();
}

Tolerance tolerance_for(DType t, const Tensor& expected, double scale, double mag_floor) {
  switch (t) {
    case DType::f64:
      // Only summation order differs from the reference.
      return {1e-10 * scale, 1e-12 * scale};
    case DType::f32:
      return {1e-5 * scale, 1e-6 * scale};
    case DType::f16:
    case DType::bf16: {
      const double rtol = (t == DType::f16 ? 1e-3 : 1.6e-2) * scale;
      double mag = 0;
      size_t n = 0;
      for (double v : expected.to_vector<double>()) {
        if (std::isfinite(v)) mag += std::abs(v), ++n;
      }
      mag = n ? mag / static_cast<double>(n) : 0.0;
      // Relative to the magnitude: an element near zero that came out of a cancellation (a dot
      // product, a normalisation) is judged against the tensor's typical size. The floor keeps
      // all-tiny outputs from demanding better than the format's resolution.
      return {rtol, rtol * std::max(mag, mag_floor)};
    }
    default:
      return {0.0, 0.0};
  }
}

// --------------------------------------------------------------------------- poisoned memory
namespace {

class PoisonAllocator final : public Allocator {
 public:
  Allocator* inner = nullptr;
  void* allocate(size_t nbytes, int device_index) override {
    void* p = inner->allocate(nbytes, device_index);
    if (p != nullptr) std::memset(p, 0xFF, nbytes);
    return p;
  }
  // Buffers may be freed after the guard is gone (then by `inner` directly): the pointer and size
  // are inner's own, so either path frees them correctly.
  void deallocate(void* ptr, size_t nbytes, int device_index) override {
    inner->deallocate(ptr, nbytes, device_index);
  }
};

PoisonAllocator g_poison;

}  // namespace

PoisonGuard::PoisonGuard() : previous_(allocator_for(DeviceType::CPU)) {
  if (previous_ == &g_poison) return;  // nested guard: already poisoning
  g_poison.inner = previous_;
  register_allocator(DeviceType::CPU, &g_poison);
}

PoisonGuard::~PoisonGuard() {
  register_allocator(DeviceType::CPU, previous_);
}

uint64_t case_seed() {
  if (const char* env = std::getenv("GRADUS_HARNESS_SEED")) return std::strtoull(env, nullptr, 10);
  return testing::fresh_seed();
}

std::string device_tag(Device d) {
  return d.is_cpu() ? "cpu" : "cuda" + std::to_string(d.index());
}

std::string dtype_tag(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::boolean:
      return "bool";
  }
  return "unknown";
}

}  // namespace gradus::harness
