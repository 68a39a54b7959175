// Helpers for the CPU backend tests: raw tensors filled and read element by element (independent
// of the backend's own copy/cast code), fresh random inputs and tolerance checks against float64
// references computed in the tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gradus/core/tensor.h"
#include "support/test_util.h"

namespace gradus::backend_test {

inline backend::Backend& cpu() {
  return backend::backend_for(DeviceType::CPU);
}

// Writes v into element `index` (storage element units) of t, converting to t's dtype.
inline void poke(const Tensor& t, int64_t index, double v) {
  char* base = static_cast<char*>(t.raw_data());
  switch (t.dtype()) {
    case DType::f32:
      reinterpret_cast<float*>(base)[index] = static_cast<float>(v);
      break;
    case DType::f64:
      reinterpret_cast<double*>(base)[index] = v;
      break;
    case DType::f16:
      reinterpret_cast<Half*>(base)[index] = Half(static_cast<float>(v));
      break;
    case DType::bf16:
      reinterpret_cast<BFloat16*>(base)[index] = BFloat16(static_cast<float>(v));
      break;
    case DType::i32:
      reinterpret_cast<int32_t*>(base)[index] = static_cast<int32_t>(v);
      break;
    case DType::i64:
      reinterpret_cast<int64_t*>(base)[index] = static_cast<int64_t>(v);
      break;
    case DType::u8:  // wraps like a C cast through int64 (no UB for negatives)
      reinterpret_cast<uint8_t*>(base)[index] = static_cast<uint8_t>(static_cast<int64_t>(v));
      break;
    case DType::boolean:
      reinterpret_cast<bool*>(base)[index] = v != 0;
      break;
  }
}

inline double peek(const Tensor& t, int64_t index) {
  const char* base = static_cast<const char*>(t.raw_data());
  switch (t.dtype()) {
    case DType::f32:
      return reinterpret_cast<const float*>(base)[index];
    case DType::f64:
      return reinterpret_cast<const double*>(base)[index];
    case DType::f16:
      return static_cast<float>(reinterpret_cast<const Half*>(base)[index]);
    case DType::bf16:
      return static_cast<float>(reinterpret_cast<const BFloat16*>(base)[index]);
    case DType::i32:
      return reinterpret_cast<const int32_t*>(base)[index];
    case DType::i64:
      return static_cast<double>(reinterpret_cast<const int64_t*>(base)[index]);
    case DType::u8:
      return reinterpret_cast<const uint8_t*>(base)[index];
    case DType::boolean:
      return reinterpret_cast<const bool*>(base)[index] ? 1.0 : 0.0;
  }
  return 0;
}

// Storage offset (elements, relative to data) of the row-major logical element i.
inline int64_t element_offset(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (i % t.size(d)) * t.stride(d);
    i /= t.size(d);
  }
  return off;
}

// Contiguous tensor holding `values` (row-major).
inline Tensor make(const Shape& shape, const std::vector<double>& values, DType dtype) {
  Tensor t = empty(shape, {dtype, Device::cpu(), false});
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) poke(t, i, values[static_cast<size_t>(i)]);
  return t;
}

// All logical elements (row-major, through strides) as double.
inline std::vector<double> read(const Tensor& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    out[static_cast<size_t>(i)] = peek(t, element_offset(t, i));
  return out;
}

// Output tensor poisoned with NaN (or a sentinel for integer types), so unwritten elements show.
inline Tensor poisoned(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, {dtype, Device::cpu(), false});
  const double poison = is_floating(dtype) ? std::nan("") : 77.0;
  for (int64_t i = 0; i < t.numel(); ++i) poke(t, i, poison);
  return t;
}

inline std::vector<double> uniform_values(int64_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = dist(rng);
  return v;
}

// Values as the dtype stores them (so references start from exactly the kernel's inputs).
inline std::vector<double> rounded(const std::vector<double>& v, DType dtype) {
  Tensor t = make({static_cast<int64_t>(v.size())}, v, dtype);
  return read(t);
}

// |a - e| <= atol + rtol |e| elementwise; NaNs and infinities must match exactly.
inline ::testing::AssertionResult close(const std::vector<double>& actual,
                                        const std::vector<double>& expected, double rtol,
                                        double atol, const std::string& what = "") {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << actual.size() << " vs " << expected.size();
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (std::isnan(e) || std::isnan(a)) {
      if (std::isnan(e) && std::isnan(a)) continue;
    } else if (std::isinf(e) || std::isinf(a)) {
      if (a == e) continue;
    } else if (std::abs(a - e) <= atol + rtol * std::abs(e)) {
      continue;
    }
    return ::testing::AssertionFailure()
           << what << ": element " << i << " is " << a << ", expected " << e << " (rtol " << rtol
           << ", atol " << atol << ")";
  }
  return ::testing::AssertionSuccess();
}

// Tolerances for results stored in `dtype` against a float64 reference.
inline double rtol_for(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 1e-12;
    case DType::f16:
      return 2e-3;
    case DType::bf16:
      return 1.6e-2;
    default:
      return 1e-5;
  }
}

}  // namespace gradus::backend_test
