// Helpers for the GPU tests: every CUDA kernel is checked against its CPU twin on the same inputs
// (fresh random values each run, non-contiguous and broadcast layouts, sizes that are not
// multiples of the block size), with dtype-aware tolerances. Every test skips cleanly when no CUDA
// device is visible (and in builds without the CUDA backend).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gradus/core/cuda.h"
#include "gradus/gradus.h"
#include "support/test_util.h"

#define GRADUS_REQUIRE_GPU()                                                          \
  do {                                                                                \
    if (::gradus::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible"; \
  } while (0)

namespace gradus::gpu_test {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline backend::Backend& cpu() {
  return backend::backend_for(DeviceType::CPU);
}
inline backend::Backend& gpu() {
  return backend::backend_for(DeviceType::CUDA);
}
inline Device cuda0() {
  return Device::cuda(0);
}

// The brief's tolerances: relative, also applied as an absolute floor at the data's scale.
inline double tol(DType t) {
  switch (t) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-5;
    case DType::f16:
      return 1e-3;
    case DType::bf16:
      return 1.6e-2;
    default:
      return 0.0;
  }
}

// Uniform random values in [lo, hi) on the CPU in dtype (drawn in float64, then rounded).
inline Tensor rnd(const Shape& shape, DType dtype, double lo = -1.0, double hi = 1.0,
                  uint64_t seed = 0) {
  return testing::random_tensor(shape, seed == 0 ? testing::fresh_seed() : seed, lo, hi, DType::f64)
      .to(dtype);
}

// Integer-valued random values (ties for argmax, exact integer kernels).
inline Tensor rnd_int(const Shape& shape, DType dtype, int64_t lo, int64_t hi) {
  std::mt19937_64 rng(testing::fresh_seed());
  std::uniform_int_distribution<int64_t> d(lo, hi - 1);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = static_cast<double>(d(rng));
  return tensor(v, shape, {DType::f64, Device::cpu()}).to(dtype);
}

// An uninitialised tensor filled with NaN (or the dtype's stand-in) so unwritten elements show.
inline Tensor poisoned(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, {dtype, device});
  backend::backend_for(device.type()).fill(t, is_floating(dtype) ? kNaN : 77.0);
  return t;
}

// The same values as t on `device`, stored non-contiguously: every other element of a buffer
// twice as wide in the last dim (rank >= 1), or transposed for 2-D when `transpose`.
inline Tensor strided_copy(const Tensor& t, Device device, bool transpose = false) {
  backend::Backend& be = backend::backend_for(device.type());
  Tensor src = t.to(device);
  if (transpose && t.dim() == 2) {
    Tensor buf = empty({t.size(1), t.size(0)}, {t.dtype(), device});
    Tensor view = buf.as_strided_raw(t.sizes(), {1, t.size(0)}, buf.offset());
    be.copy(src, view);
    return view;
  }
  if (t.dim() == 0) return src;
  Shape wide = t.sizes();
  wide.back() *= 2;
  Tensor buf = empty(wide, {t.dtype(), device});
  Shape strides = contiguous_strides(wide);
  strides.back() = 2;
  Tensor view = buf.as_strided_raw(t.sizes(), strides, buf.offset() + 1);
  be.copy(src, view);
  return view;
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) {
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  }
  return m;
}

// |gpu - cpu| <= rtol |cpu| + atol_scale * rtol * max|cpu| elementwise (NaN must match NaN).
inline ::testing::AssertionResult close(const Tensor& gpu_result, const Tensor& cpu_result,
                                        double rtol, double atol_scale = 1.0) {
  if (gpu_result.sizes() != cpu_result.sizes()) {
    return ::testing::AssertionFailure()
           << "shape " << shape_str(gpu_result.sizes()) << " vs " << shape_str(cpu_result.sizes());
  }
  // Moved to the host in its own dtype first, so no GPU cast kernel is involved in reading it.
  const std::vector<double> a = gpu_result.to(Device::cpu()).to_vector<double>();
  const std::vector<double> e = cpu_result.to(Device::cpu()).to_vector<double>();
  const double atol = atol_scale * rtol * std::max(1.0, max_abs(e));
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(e[i])) continue;
    if (std::isinf(e[i]) && a[i] == e[i]) continue;
    if (!(std::fabs(a[i] - e[i]) <= atol + rtol * std::fabs(e[i]))) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << a.size() << ": gpu " << a[i] << " vs cpu " << e[i]
             << " (rtol " << rtol << ", atol " << atol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Exact equality (NaN == NaN), for casts, integer kernels and the random streams.
inline ::testing::AssertionResult identical(const Tensor& gpu_result, const Tensor& cpu_result) {
  return close(gpu_result, cpu_result, 0.0, 0.0);
}

// Raw bytes of a contiguous tensor on the host (bitwise comparisons of the random streams).
inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = t.to(Device::cpu()).contiguous();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return {p, p + c.numel() * static_cast<int64_t>(c.element_size())};
}

// The same bits element by element, except that any NaN matches any NaN: CUDA's half -> float
// conversion (cvt.f32.f16) returns the canonical NaN where the CPU keeps the sign and payload.
// A difference names the element, both values and both bit patterns.
inline ::testing::AssertionResult same_bits(const Tensor& gpu_result, const Tensor& cpu_result) {
  if (gpu_result.sizes() != cpu_result.sizes() || gpu_result.dtype() != cpu_result.dtype()) {
    return ::testing::AssertionFailure() << "shape or dtype differ";
  }
  const std::vector<uint8_t> a = bytes_of(gpu_result), e = bytes_of(cpu_result);
  const std::vector<double> av = gpu_result.to(Device::cpu()).to_vector<double>();
  const std::vector<double> ev = cpu_result.to(Device::cpu()).to_vector<double>();
  const size_t w = gpu_result.element_size();
  for (size_t i = 0; i < av.size(); ++i) {
    if (std::equal(a.begin() + i * w, a.begin() + (i + 1) * w, e.begin() + i * w)) continue;
    if (std::isnan(av[i]) && std::isnan(ev[i])) continue;
    auto hex = [&](const std::vector<uint8_t>& b) {
      std::string s = "0x";
      for (size_t j = w; j-- > 0;) {
        static const char* digits = "0123456789abcdef";
        s += digits[b[i * w + j] >> 4];
        s += digits[b[i * w + j] & 15];
      }
      return s;
    };
    return ::testing::AssertionFailure()
           << "element " << i << " of " << av.size() << ": gpu " << av[i] << " (" << hex(a)
           << ") vs cpu " << ev[i] << " (" << hex(e) << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace gradus::gpu_test
