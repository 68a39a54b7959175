// Bit-reproducible float math for the random-number kernels, shared by the CPU and CUDA
// backends so that normal draws are identical on both devices (gradus/core/random.h).
//
// Library logf / sinf / cosf differ in their last bit between glibc and CUDA, so Box-Muller is
// written here with IEEE basic operations only: every rounding step is a single +, -, *, / or an
// explicit fmaf, all correctly rounded on both sides. On the device the separate products and
// sums use the __f*_rn intrinsics, which the compiler never fuses into FMAs; on the host, GCC
// in ISO C++ mode (the project's -std=c++20) does not contract either.
// Accuracy: log ~1 ulp on (0, 1]; sin / cos of 2 pi u ~1 ulp.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GRADUS_HOST_DEVICE __host__ __device__
#else
#define GRADUS_HOST_DEVICE
#endif

namespace gradus::rmath {

GRADUS_HOST_DEVICE inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
GRADUS_HOST_DEVICE inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
GRADUS_HOST_DEVICE inline float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
GRADUS_HOST_DEVICE inline float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}
GRADUS_HOST_DEVICE inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
GRADUS_HOST_DEVICE inline uint32_t bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
GRADUS_HOST_DEVICE inline float from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Natural log of a positive normal float (Cephes' logf scheme: x = m 2^e with m in
// [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 P(f), f = m - 1 exact by Sterbenz).
GRADUS_HOST_DEVICE inline float log(float x) {
  uint32_t u = bits(x);
  int e = static_cast<int>(u >> 23) - 126;  // x = m' 2^e with m' in [0.5, 1)
  float m = from_bits((u & 0x007fffffu) | 0x3f000000u);
  if (m < 0.70710678118654752f) {
    m = add(m, m);  // exact
    e -= 1;
  }
  const float f = add(m, -1.0f);
  const float z = mul(f, f);
  float p = 7.0376836292e-2f;
  p = fma(p, f, -1.1514610310e-1f);
  p = fma(p, f, 1.1676998740e-1f);
  p = fma(p, f, -1.2420140846e-1f);
  p = fma(p, f, 1.4249322787e-1f);
  p = fma(p, f, -1.6668057665e-1f);
  p = fma(p, f, 2.0000714765e-1f);
  p = fma(p, f, -2.4999993993e-1f);
  p = fma(p, f, 3.3333331174e-1f);
  const float fe = static_cast<float>(e);
  float y = mul(mul(f, z), p);
  y = fma(fe, -2.12194440e-4f, y);
  y = fma(z, -0.5f, y);
  const float r = add(f, y);
  return fma(fe, 0.693359375f, r);
}

// sin and cos of 2 pi u for u in [0, 1] a multiple of 2^-24 (a Philox unit float). The turn is
// reduced exactly to r in [-1/8, 1/8] around the nearest quarter, then Cephes' sinf / cosf
// polynomials on [-pi/4, pi/4] and a quadrant rotation.
GRADUS_HOST_DEVICE inline void sincos_turns(float u, float& s_out, float& c_out) {
  const float q = static_cast<float>(static_cast<int>(add(mul(u, 4.0f), 0.5f)));  // nearest
  const float r = fma(q, -0.25f, u);  // exact: u and q / 4 are multiples of 2^-24
  const float t = mul(r, 6.28318530717958647692f);
  const float z = mul(t, t);
  float ps = -1.9515295891e-4f;
  ps = fma(ps, z, 8.3321608736e-3f);
  ps = fma(ps, z, -1.6666654611e-1f);
  const float s = fma(mul(ps, z), t, t);
  float pc = 2.443315711809948e-5f;
  pc = fma(pc, z, -1.388731625493765e-3f);
  pc = fma(pc, z, 4.166664568298827e-2f);
  const float c = fma(mul(pc, z), z, fma(z, -0.5f, 1.0f));
  switch (static_cast<int>(q) & 3) {
    case 0:
      s_out = s;
      c_out = c;
      return;
    case 1:
      s_out = c;
      c_out = -s;
      return;
    case 2:
      s_out = -s;
      c_out = -c;
      return;
    default:
      s_out = -c;
      c_out = s;
      return;
  }
}

// The four standard normals of one Philox block: Box-Muller on the word pairs (w0, w1) and
// (w2, w3). u1 = 1 - unit(w) in (0, 1] (never 0), u2 = unit(w'); n = sqrt(-2 log u1) cos / sin.
GRADUS_HOST_DEVICE inline std::array<float, 4> box_muller(const std::array<uint32_t, 4>& w) {
  std::array<float, 4> n{};
  for (int p = 0; p < 2; ++p) {
    const float u1 = add(1.0f, -mul(static_cast<float>(w[2 * p] >> 8), 1.0f / 16777216.0f));
    const float u2 = mul(static_cast<float>(w[2 * p + 1] >> 8), 1.0f / 16777216.0f);
    const float rad = sqrt(mul(-2.0f, log(u1)));
    float s, c;
    sincos_turns(u2, s, c);
    n[2 * p] = mul(rad, c);
    n[2 * p + 1] = mul(rad, s);
  }
  return n;
}

}  // namespace gradus::rmath
