// Element types a tensor can hold, and the two 16-bit float storage types.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace gradus {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };

inline constexpr int kNumDTypes = 8;

// IEEE half precision. On the CPU it is a storage type: arithmetic upcasts to float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};

// bfloat16: the upper 16 bits of a float, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a quiet NaN
      bits = static_cast<uint16_t>((u >> 16) | 0x40u);
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<uint16_t>(u >> 16);
    }
  }
  explicit operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// Portable bit-exact conversions (round to nearest even; any NaN becomes the quiet NaN 0x7e00).
float half_to_float_portable(uint16_t h);
uint16_t float_to_half_portable(float f);
// With F16C (x86 -march=native builds) the compiler's _Float16 conversions are one instruction
// each and vectorise; they round the same way (a NaN keeps its payload, quieted). Translation
// units built without F16C (CUDA sources) get the portable body: both give the same bits for
// every non-NaN value, so which one an inline call resolves to does not matter.
inline float half_to_float(uint16_t h) {
#if defined(__F16C__) && defined(__FLT16_MAX__) && !defined(__CUDACC__)
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
#else
  return half_to_float_portable(h);
#endif
}
inline uint16_t float_to_half(float f) {
#if defined(__F16C__) && defined(__FLT16_MAX__) && !defined(__CUDACC__)
  const _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
#else
  return float_to_half_portable(f);
#endif
}
inline Half::Half(float f) : bits(float_to_half(f)) {}
inline Half::operator float() const {
  return half_to_float(bits);
}

size_t dtype_size(DType t);
// "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool" (PyTorch's names).
const char* dtype_name(DType t);
// Accepts the names above and the short forms f32, f64, f16, bf16, i32, i64, u8.
DType dtype_from_name(const std::string& name);
bool is_floating(DType t);
bool is_integral(DType t);  // integer types and bool
// The type both operands are converted to for a binary op (PyTorch's promotion lattice).
DType promote_types(DType a, DType b);

// Maps a C++ type to its DType.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::boolean;
};

// Calls fn(T{}) with T the C++ type of `t`. Kernels use it to instantiate once per dtype.
#define GRADUS_DISPATCH_CASE(ENUM, TYPE) \
  case ::gradus::DType::ENUM: {          \
    using scalar_t = TYPE;               \
    return fn(scalar_t{});               \
  }

template <typename Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
    GRADUS_DISPATCH_CASE(f32, float)
    GRADUS_DISPATCH_CASE(f64, double)
    GRADUS_DISPATCH_CASE(f16, Half)
    GRADUS_DISPATCH_CASE(bf16, BFloat16)
    GRADUS_DISPATCH_CASE(i32, int32_t)
    GRADUS_DISPATCH_CASE(i64, int64_t)
    GRADUS_DISPATCH_CASE(u8, uint8_t)
    GRADUS_DISPATCH_CASE(boolean, bool)
  }
  return fn(float{});
}

template <typename Fn>
decltype(auto) dispatch_floating(DType t, Fn&& fn) {
  switch (t) {
    GRADUS_DISPATCH_CASE(f32, float)
    GRADUS_DISPATCH_CASE(f64, double)
    GRADUS_DISPATCH_CASE(f16, Half)
    GRADUS_DISPATCH_CASE(bf16, BFloat16)
    default:
      break;
  }
  return fn(float{});
}
#undef GRADUS_DISPATCH_CASE

}  // namespace gradus
