// Bit-reproducible float math for the CUDA random-number kernels: the normal sampler of the CPU
// backend (src/backend/cpu/random.cpp, with vec::log / vec::sincos_turns of
// src/backend/cpu/vec_math.h) written out operation by operation, so that the same seed gives
// the same normals on both devices. Library logf / sinf / cosf differ in their last bit between
// glibc and CUDA, hence the hand-written Cephes polynomials on both sides.
//
// Every rounding step is a single +, *, sqrt or an explicit fma, all correctly rounded on both
// sides. On the device the separate products and sums use the __f*_rn intrinsics, which the
// compiler never fuses into FMAs (the CPU is built in ISO C++ mode, which does not contract).
// If the CPU formulas change, change these too: tests/gpu/philox_test.cpp compares the bytes.
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

// Device-side fused multiply-add: the CPU's vec::fmadd is an FMA on targets that have one
// (x86-64 with -march=native, AArch64), which is what parity with the GPU assumes.
GRADUS_HOST_DEVICE inline float fmadd(float a, float b, float c) {
  return fma(a, b, c);
}

// Natural log of a positive normal float: src/backend/cpu/vec_math.h's vec::log operation by
// operation (Cephes logf: m in [sqrt(1/2), sqrt(2)), degree-8 polynomial, ~1 ulp).
GRADUS_HOST_DEVICE inline float log(float x) {
  const uint32_t b = bits(x);
  float e = static_cast<float>(static_cast<int32_t>((b >> 23) & 0xffu) - 126);
  float m = from_bits((b & 0x807fffffu) | 0x3f000000u);  // [0.5, 1)
  const bool low = m < 0.70710678118654752f;
  e = low ? add(e, -1.0f) : e;
  m = low ? add(add(m, m), -1.0f) : add(m, -1.0f);
  const float z = mul(m, m);
  float y = 7.0376836292e-2f;
  y = fmadd(y, m, -1.1514610310e-1f);
  y = fmadd(y, m, 1.1676998740e-1f);
  y = fmadd(y, m, -1.2420140846e-1f);
  y = fmadd(y, m, 1.4249322787e-1f);
  y = fmadd(y, m, -1.6668057665e-1f);
  y = fmadd(y, m, 2.0000714765e-1f);
  y = fmadd(y, m, -2.4999993993e-1f);
  y = fmadd(y, m, 3.3333331174e-1f);
  y = mul(mul(y, m), z);
  y = fmadd(e, -2.12194440e-4f, y);
  y = fmadd(z, -0.5f, y);
  return fmadd(e, 0.693359375f, add(m, y));
}

// sin and cos of 2 pi u for u in [0, 1]: vec::sincos_turns operation by operation (the quadrant
// split off exactly in turns, Cephes' sinf / cosf polynomials on |r| <= pi/4).
GRADUS_HOST_DEVICE inline void sincos_turns(float u, float& s, float& c) {
#if defined(__CUDA_ARCH__)
  const float q = rintf(mul(4.0f, u));  // round half to even, like std::nearbyint
#else
  const float q = std::nearbyint(4.0f * u);
#endif
  const float r = mul(add(u, -mul(0.25f, q)), 6.28318530717958647692f);  // u - q/4 is exact
  const float r2 = mul(r, r);
  float ps = -1.9515295891e-4f;
  ps = fmadd(ps, r2, 8.3321608736e-3f);
  ps = fmadd(ps, r2, -1.6666654611e-1f);
  const float sr = fmadd(mul(ps, r2), r, r);
  float pc = 2.443315711809948e-5f;
  pc = fmadd(pc, r2, -1.388731625493765e-3f);
  pc = fmadd(pc, r2, 4.166664568298827e-2f);
  const float cr = fmadd(mul(pc, r2), r2, fmadd(-0.5f, r2, 1.0f));
  const int32_t quadrant = static_cast<int32_t>(q) & 3;
  const bool swap = (quadrant & 1) != 0;
  const float s0 = swap ? cr : sr, c0 = swap ? sr : cr;
  s = (quadrant & 2) != 0 ? -s0 : s0;
  c = (quadrant == 1 || quadrant == 2) ? -c0 : c0;
}

// The four standard normals of one Philox block, as the CPU's box_muller computes them: for the
// word pairs (w0, w1) and (w2, w3), u1 = 1 - unit(w) in (0, 1], u2 = unit(w'),
// rad = sqrt(-2 log u1), (n0, n1) = (rad cos 2 pi u2, rad sin 2 pi u2).
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
