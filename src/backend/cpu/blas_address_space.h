#pragma once
// How many BLAS threads fit under an address-space limit (RLIMIT_AS, `ulimit -v`, `prlimit --as`).
//
// OpenBLAS maps one work buffer per thread while it loads, and one more for each call in flight
// (gradus calls it from every thread of a parallel GEMM); when a mapping fails it retries forever,
// so a process under a low limit hangs instead of failing. gradus therefore asks the kernel, before
// OpenBLAS does, how many threads' buffers fit, runs that many threads (or refuses with a message
// when none fit), and has OpenBLAS map the callers' buffers at once (reserve_blas_buffers), so
// that a later shortage ends in gradus's own out-of-memory error, never in OpenBLAS's loop. Plain
// libc only: the start-up guard (src/startup) calls this before anything else is set up.
#include <sys/mman.h>
#include <sys/resource.h>

#include <cstddef>

namespace gradus::backend::cpu {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;
// OpenBLAS's per-thread buffer on x86-64 (BUFFER_SIZE, 32 << 22 bytes in common_x86_64.h).
inline constexpr std::size_t kBlasBufferBytes = 128 * kMiB;
// Each thread's stack and the first allocations of its malloc arena.
inline constexpr std::size_t kThreadOverheadBytes = 16 * kMiB;
// What the program itself needs beyond the threads before its first tensor.
inline constexpr std::size_t kProgramHeadroomBytes = 32 * kMiB;

// Address space `threads` threads need: two BLAS buffers each (its own, and one for its calls).
inline constexpr std::size_t blas_address_space_bytes(int threads) {
  const auto n = static_cast<std::size_t>(threads);
  return 2 * n * kBlasBufferBytes + n * kThreadOverheadBytes + kProgramHeadroomBytes;
}

// The soft RLIMIT_AS in bytes, or 0 when there is none.
inline std::size_t address_space_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<std::size_t>(limit.rlim_cur);
}

// Whether `bytes` more of address space can be mapped now. Measured, not computed: a reservation
// is mapped (never touched) and unmapped, so whatever the process holds already is accounted for.
inline bool address_space_fits(std::size_t bytes) {
  void* probe = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (probe == MAP_FAILED) return false;
  munmap(probe, bytes);
  return true;
}

// The largest thread count in [0, wanted] whose BLAS buffers fit (wanted when there is no limit).
inline int blas_threads_that_fit(int wanted) {
  if (address_space_limit() == 0) return wanted;
  for (int threads = wanted; threads >= 1; --threads) {
    if (address_space_fits(blas_address_space_bytes(threads))) return threads;
  }
  return 0;
}

}  // namespace gradus::backend::cpu
