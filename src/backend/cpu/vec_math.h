// Branch-free float32 math that GCC/Clang vectorise inside `#pragma omp simd` loops (libm's expf,
// tanhf, erff are scalar calls and block vectorisation). Accuracy: exp ~1 ulp, tanh ~2 ulp,
// erf ~2 ulp, erfc and the normal CDF (for GELU) ~5e-7 relative even far in the tails. Double
// precision kernels use <cmath> directly.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace gradus::backend::cpu::vec {

// a * b + c, fused where the target has FMA (a libm fma call would stop vectorisation). Formulas
// that must give the same bits on every CPU (the random streams) use std::fma instead.
inline float fmadd(float a, float b, float c) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// x * x - xx exactly, for xx = x * x rounded: the rounding error of a square, which the normal
// CDF's far tail needs. An FMA gives it; without one (the portable baseline copy of the CPU
// backend) double does, since the square of a float is exact in double.
inline float square_error(float x, float xx) {
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
  return std::fma(x, x, -xx);
#else
  return static_cast<float>(static_cast<double>(x) * static_cast<double>(x) -
                            static_cast<double>(xx));
#endif
}

inline float pow2i(int32_t k) {  // 2^k for k in [-126, 127]
  return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23);
}

// e^x. Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial for e^r, and 2^n
// applied in two halves so results down to the subnormal range (and overflow to inf) are right.
inline float exp(float x) {
  x = x < -104.0f ? -104.0f : x;  // NaN passes both clamps unchanged
  x = x > 89.0f ? 89.0f : x;
  // Round x*log2(e) to an integer with the 1.5 * 2^23 trick (no float->int conversion of NaN).
  const float shifted = fmadd(x, 1.44269504088896341f, 12582912.0f);
  const float n = shifted - 12582912.0f;
  const int32_t ni = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - 0x4B400000u);
  float r = fmadd(n, -0.693359375f, x);
  r = fmadd(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmadd(p, r, 1.3981999507e-3f);
  p = fmadd(p, r, 8.3334519073e-3f);
  p = fmadd(p, r, 4.1665795894e-2f);
  p = fmadd(p, r, 1.6666665459e-1f);
  p = fmadd(p, r, 5.0000001201e-1f);
  const float y = fmadd(p, r * r, r) + 1.0f;
  const int32_t n1 = ni >> 1;
  return y * pow2i(n1) * pow2i(ni - n1);
}

inline float sigmoid(float x) {
  return 1.0f / (1.0f + exp(-x));
}

// tanh: an odd polynomial for |x| < 0.625 (Cephes), 1 - 2 / (e^{2|x|} + 1) above.
inline float tanh(float x) {
  const float z = std::fabs(x);
  const float z2 = x * x;
  float p = -5.70498872745e-3f;
  p = fmadd(p, z2, 2.06390887954e-2f);
  p = fmadd(p, z2, -5.37397155531e-2f);
  p = fmadd(p, z2, 1.33314422036e-1f);
  p = fmadd(p, z2, -3.33332819422e-1f);
  const float small = fmadd(p * z2, x, x);
  const float large = 1.0f - 2.0f / (exp(2.0f * z) + 1.0f);
  return z < 0.625f ? small : std::copysign(large, x);
}

// erfcx(a) = e^{a^2} erfc(a) ~ t P(t) with t = 1 / (1 + a/2), for every a >= 0: P is a degree-9
// relative-error fit (< 3e-7 in float), so e^{-a^2} t P(t) is accurate relative to erfc's
// tiny tail values.
inline float erfcx_poly(float t) {
  float p = -0.025567354634404182f;
  p = fmadd(p, t, 0.06466630101203918f);
  p = fmadd(p, t, 0.030357513576745987f);
  p = fmadd(p, t, -0.19813218712806702f);
  p = fmadd(p, t, 0.07920948415994644f);
  p = fmadd(p, t, 0.05835900083184242f);
  p = fmadd(p, t, 0.1803935319185257f);
  p = fmadd(p, t, 0.24651473760604858f);
  p = fmadd(p, t, 0.2821040749549866f);
  p = fmadd(p, t, 0.2820947468280792f);
  return t * p;
}

// e^{-(sq + sq_err)} where sq + sq_err is a square split exactly (sq_err from square_error, so the
// rounding of the square does not cost relative accuracy far in the tail); 0 once it underflows.
inline float exp_neg_split(float sq, float sq_err) {
  const bool underflow = sq >= 104.0f;
  sq_err = underflow ? 0.0f : sq_err;  // (inf * inf - inf would be NaN)
  const float e = exp(underflow ? -104.0f : -sq) * (1.0f - sq_err);
  return underflow ? 0.0f : e;
}

// erfc(a) for a >= 0.
inline float erfc_large(float a) {
  const float sq = a * a;
  const float t = 1.0f / fmadd(0.5f, a, 1.0f);
  return exp_neg_split(sq, square_error(a, sq)) * erfcx_poly(t);
}

// erf(x) for |x| < 0.875 as x + x P(x^2), P a degree-5 relative-error fit (< 2e-7 in float).
inline float erf_small(float x) {
  const float x2 = x * x;
  float p = -0.0006203227676451206f;
  p = fmadd(p, x2, 0.005032177548855543f);
  p = fmadd(p, x2, -0.026791460812091827f);
  p = fmadd(p, x2, 0.11282455176115036f);
  p = fmadd(p, x2, -0.3761255145072937f);
  p = fmadd(p, x2, 0.12837915122509003f);
  return fmadd(p, x, x);
}

inline float erf(float x) {
  const float a = std::fabs(x);
  const float big = 1.0f - erfc_large(a);
  return a < 0.875f ? erf_small(x) : std::copysign(big, x);
}

// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2 and density phi(x), sharing one exp:
// e^{-x^2/2} is both phi's numerator and erfc's scale. Phi is accurate relative to its value in
// both tails (GELU = x Phi(x) stays accurate for very negative x).
inline void normal_cdf_pdf(float x, float& cdf, float& pdf) {
  const float a = std::fabs(x) * 0.70710678118654752f;
  const float xx = x * x;
  // x^2 / 2 split exactly from x itself (not from the rounded a).
  const float e = exp_neg_split(0.5f * xx, 0.5f * square_error(x, xx));
  const float tail = 0.5f * e * erfcx_poly(1.0f / fmadd(0.5f, a, 1.0f));  // Phi(-|x|)
  cdf = x < 0.0f ? tail : 1.0f - tail;
  pdf = e * 0.39894228040143267794f;
}
inline float normal_cdf(float x) {
  float cdf, pdf;
  normal_cdf_pdf(x, cdf, pdf);
  return cdf;
}

// Natural log for positive normal floats (Cephes logf: m in [sqrt(1/2), sqrt(2)), degree-8
// polynomial, ~1 ulp). Used by the normal sampler, so the result is reproducible anywhere.
inline float log(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  float e = static_cast<float>(static_cast<int32_t>((bits >> 23) & 0xffu) - 126);
  float m = std::bit_cast<float>((bits & 0x807fffffu) | 0x3f000000u);  // [0.5, 1)
  const bool low = m < 0.70710678118654752f;
  e = low ? e - 1.0f : e;
  m = low ? m + m - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = fmadd(y, m, -1.1514610310e-1f);
  y = fmadd(y, m, 1.1676998740e-1f);
  y = fmadd(y, m, -1.2420140846e-1f);
  y = fmadd(y, m, 1.4249322787e-1f);
  y = fmadd(y, m, -1.6668057665e-1f);
  y = fmadd(y, m, 2.0000714765e-1f);
  y = fmadd(y, m, -2.4999993993e-1f);
  y = fmadd(y, m, 3.3333331174e-1f);
  y = y * m * z;
  y = fmadd(e, -2.12194440e-4f, y);
  y = fmadd(z, -0.5f, y);
  return fmadd(e, 0.693359375f, m + y);
}

// sin and cos of 2 pi u for u in [0, 1] (a fraction of a turn): the quadrant is split off
// exactly in turns, leaving |r| <= pi/4 for Cephes' sinf / cosf polynomials (~1 ulp).
inline void sincos_turns(float u, float& s, float& c) {
  const float q = std::nearbyint(4.0f * u);
  const float r = (u - 0.25f * q) * 6.28318530717958647692f;  // u - q/4 is exact
  const float r2 = r * r;
  float ps = -1.9515295891e-4f;
  ps = fmadd(ps, r2, 8.3321608736e-3f);
  ps = fmadd(ps, r2, -1.6666654611e-1f);
  const float sr = fmadd(ps * r2, r, r);
  float pc = 2.443315711809948e-5f;
  pc = fmadd(pc, r2, -1.388731625493765e-3f);
  pc = fmadd(pc, r2, 4.166664568298827e-2f);
  const float cr = fmadd(pc * r2, r2, fmadd(-0.5f, r2, 1.0f));
  const int32_t quadrant = static_cast<int32_t>(q) & 3;
  const bool swap = (quadrant & 1) != 0;
  const float s0 = swap ? cr : sr, c0 = swap ? sr : cr;
  s = (quadrant & 2) != 0 ? -s0 : s0;
  c = (quadrant == 1 || quadrant == 2) ? -c0 : c0;
}

// ------------------------------------------------------------------------------------------
// Double overloads (<cmath>), so kernels templated on the compute type call vec::f(x) for both.
inline double exp(double x) {
  return std::exp(x);
}
inline double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
inline double tanh(double x) {
  return std::tanh(x);
}
inline double erf(double x) {
  return std::erf(x);
}
inline double normal_cdf(double x) {
  return 0.5 * std::erfc(-x * 0.70710678118654752440);
}
inline void normal_cdf_pdf(double x, double& cdf, double& pdf) {
  cdf = normal_cdf(x);
  pdf = std::exp(-0.5 * x * x) * 0.39894228040143267794;
}
inline double fmadd(double a, double b, double c) {
  return a * b + c;
}

// Activations shared by the elementwise kernels and the GEMM epilogue (C = float or double).
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kGeluCoef = 0.044715;

template <typename C>
inline C gelu(C x) {
  return x * normal_cdf(x);
}
// d/dx x Phi(x) = Phi(x) + x phi(x)
template <typename C>
inline C gelu_grad(C x) {
  C cdf, pdf;
  normal_cdf_pdf(x, cdf, pdf);
  return fmadd(x, pdf, cdf);
}
// 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3), written as x sigmoid(2u): no
// cancellation for negative x.
template <typename C>
inline C gelu_tanh(C x) {
  const C u = C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x);
  return x * sigmoid(C(2) * u);
}
// With s = sigmoid(2u): 0.5 (1 + tanh u) = s and 1 - tanh^2 u = 4 s (1 - s).
template <typename C>
inline C gelu_tanh_grad(C x) {
  const C u = C(kSqrt2OverPi) * (x + C(kGeluCoef) * x * x * x);
  const C s = sigmoid(C(2) * u);
  return s + C(2) * x * s * (C(1) - s) * C(kSqrt2OverPi) * (C(1) + C(3 * kGeluCoef) * x * x);
}
template <typename C>
inline C silu_grad(C x) {
  const C s = sigmoid(x);
  return s * (C(1) + x * (C(1) - s));
}

}  // namespace gradus::backend::cpu::vec
