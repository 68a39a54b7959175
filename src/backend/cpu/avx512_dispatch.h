// The run-time choice between a hand-written AVX-512 copy of some kernels (compiled under
// `#pragma GCC target` whatever the build's flags: conv.cpp, attention_tiles.cpp, swiglu.cpp) and
// the copy built for the build's own ISA.
#pragma once

#include <cstdlib>
#include <string_view>

namespace gradus::backend::cpu {

// True when the CPU has the AVX-512 subsets those kernels use: F, BW, DQ and VL.
inline bool cpu_has_avx512() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return has;
#else
  return false;
#endif
}

// True when the environment variable `name` (GRADUS_CONV_ISA, GRADUS_ATTENTION_ISA,
// GRADUS_SWIGLU_ISA) is "base": the build-ISA copy runs even on an AVX-512 CPU (tests cover both
// copies; also a way out should AVX-512 ever misbehave somewhere).
inline bool isa_forced_base(const char* name) {
  const char* isa = std::getenv(name);
  return isa != nullptr && std::string_view(isa) == "base";
}

}  // namespace gradus::backend::cpu
