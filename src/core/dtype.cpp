#include "gradus/core/dtype.h"

#include "gradus/core/error.h"

namespace gradus {

float half_to_float_portable(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half_portable(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow (after rounding) -> inf
  if (abs < 0x33000001u) return sign;             // underflow to zero
  int exponent = static_cast<int>(abs >> 23) - 127 + 15;
  uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  if (exponent <= 0) {  // subnormal half
    const int shift = 14 - exponent;
    const uint32_t rounded = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    uint32_t r = rounded + ((rest > halfway || (rest == halfway && (rounded & 1))) ? 1 : 0);
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = (static_cast<uint32_t>(exponent) << 10) | ((mantissa >> 13) & 0x3ffu);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (r & 1))) ++r;  // may carry into the exponent: fine
  return sign | static_cast<uint16_t>(r);
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::u8:
    case DType::boolean:
      return 1;
  }
  return 1;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f64:
      return "float64";
    case DType::f16:
      return "float16";
    case DType::bf16:
      return "bfloat16";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
    case DType::u8:
      return "uint8";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  static const struct {
    const char* long_name;
    const char* short_name;
    DType type;
  } table[] = {{"float32", "f32", DType::f32}, {"float64", "f64", DType::f64},
               {"float16", "f16", DType::f16}, {"bfloat16", "bf16", DType::bf16},
               {"int32", "i32", DType::i32},   {"int64", "i64", DType::i64},
               {"uint8", "u8", DType::u8},     {"bool", "bool", DType::boolean}};
  for (const auto& e : table) {
    if (name == e.long_name || name == e.short_name) return e.type;
  }
  throw DTypeError("unknown dtype '" + name +
                   "' (expected float32, float64, float16, bfloat16, int32, int64, uint8 or bool)");
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

bool is_integral(DType t) {
  return !is_floating(t);
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;  // float beats any integer
  if (fa) {
    if (a == DType::f64 || b == DType::f64) return DType::f64;
    if (a == DType::f32 || b == DType::f32) return DType::f32;
    return DType::f32;  // f16 with bf16
  }
  // Integers: bool < u8 < i32 < i64 (u8 with a signed type goes to the signed one).
  auto rank = [](DType t) {
    switch (t) {
      case DType::boolean:
        return 0;
      case DType::u8:
        return 1;
      case DType::i32:
        return 2;
      default:
        return 3;
    }
  };
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace gradus
