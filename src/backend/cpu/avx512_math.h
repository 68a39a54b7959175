// Lane-wise math on AVX-512 vectors for the hand-written AVX-512 kernels (attention_tiles.cpp,
// swiglu.cpp), compiled for AVX-512 under `#pragma GCC target` whatever the build's flags (the
// build itself is held below AVX-512 with GCC 12, cmake/GradusHelpers.cmake). Only for GCC on
// x86-64 (GRADUS_AVX512_KERNELS), and only to be called where cpu_has_avx512() holds.
#pragma once

#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define GRADUS_AVX512_KERNELS 1
#else
#define GRADUS_AVX512_KERNELS 0
#endif

#if GRADUS_AVX512_KERNELS
#include <immintrin.h>

// Code between these two is compiled for AVX-512 (F, BW, DQ, VL). The kernels are internal to
// their files, so the ABI note about passing __m512 is moot; GCC 12's own AVX-512 intrinsics start
// from _mm512_undefined_ps(), which it then reports as -Wmaybe-uninitialized at -O3 and
// -Wuninitialized at -O1 (the sanitized build's level).
#define GRADUS_AVX512_BEGIN                                                            \
  _Pragma("GCC push_options")                                                          \
      _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,avx2,fma\")")           \
          _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wpsabi\"") \
              _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")              \
                  _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define GRADUS_AVX512_END _Pragma("GCC diagnostic pop") _Pragma("GCC pop_options")

GRADUS_AVX512_BEGIN
namespace gradus::backend::cpu::avx512 {

// e^x lane by lane: vec_math.h's exp (the same clamps, reduction and polynomial), with 2^n applied
// by VSCALEFPS, which is exact down to the subnormal range.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0F));
  x = _mm512_min_ps(x, _mm512_set1_ps(89.0F));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341F)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375F), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4F), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4F);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1F));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1F));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0F));
  return _mm512_scalef_ps(y, n);
}

// 1 / (1 + e^-x), as vec_math.h's sigmoid.
inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0F);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

// The mask of the first `count` lanes (count clamped to 0..16).
inline __mmask16 first_lanes(int64_t count) {
  if (count <= 0) return 0;
  if (count >= 16) return 0xFFFF;
  return static_cast<__mmask16>((1U << count) - 1U);
}

}  // namespace gradus::backend::cpu::avx512
GRADUS_AVX512_END
#endif  // GRADUS_AVX512_KERNELS
