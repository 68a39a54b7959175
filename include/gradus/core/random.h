// Counter-based Philox4x32-10 random numbers. A generator's whole state is (seed, offset), so it is
// trivially checkpointed, and the CPU and CUDA kernels produce the same stream for the same state.
//
// Stream layout (shared by every kernel on every device): a draw of n values at state
// (seed, offset) computes, for each group g = i / 4, philox(key = seed, counter = offset + g) and
// takes word i % 4. The generator then advances offset by ceil(n / 4) (normals use one 4-word
// block per 4 values through two Box-Muller pairs, so the same rule holds).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>

namespace gradus {

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// Philox4x32 with 10 rounds. counter = (lo, hi, 0, 0) of a 64-bit counter; key = seed.
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline std::array<uint32_t, 4>
    philox4x32(uint64_t counter, uint64_t key) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0,
           c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

// Uniform float in [0, 1) from the top 24 bits of a word.
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline float
    uint_to_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : state_{seed, 0} {}
  // Reserves `blocks` Philox blocks and returns the state to draw them from.
  PhiloxState reserve(uint64_t blocks) {
    std::lock_guard<std::mutex> lock(mu_);
    PhiloxState s = state_;
    state_.offset += blocks;
    return s;
  }
  PhiloxState state() const {
    std::lock_guard<std::mutex> lock(mu_);
    return state_;
  }
  void set_state(PhiloxState s) {
    std::lock_guard<std::mutex> lock(mu_);
    state_ = s;
  }
  void manual_seed(uint64_t seed) { set_state({seed, 0}); }

 private:
  mutable std::mutex mu_;
  PhiloxState state_;
};

// The process-wide default generator used when an op is not given one.
Generator& default_generator();
void manual_seed(uint64_t seed);

// Row slices of random draws. Pipeline parallelism runs a batch as micro-batches, one slice of
// rows at a time, yet must draw what the whole batch would have drawn (so that a pipeline run
// equals one process with the whole batch). Inside a BatchSliceGuard, an op that draws per row
// of a batch-leading tensor (dropout, attention dropout) reserves the whole batch's blocks and
// reads the part of the stream that belongs to rows [begin, begin + rows) of total_rows; the
// caller resets the generator between slices so that every slice starts at the same offset.
struct BatchSlice {
  int64_t begin = 0;
  int64_t rows = 0;
  int64_t total_rows = 0;
};

// Sets this thread's slice for its lifetime (nested guards restore the outer slice).
class BatchSliceGuard {
 public:
  explicit BatchSliceGuard(BatchSlice slice);
  ~BatchSliceGuard();
  BatchSliceGuard(const BatchSliceGuard&) = delete;
  BatchSliceGuard& operator=(const BatchSliceGuard&) = delete;

 private:
  BatchSlice previous_;
  bool had_previous_;
};

// This thread's slice, or nullptr outside a BatchSliceGuard.
const BatchSlice* current_batch_slice();

// The draw of `rows * per_row` values of a tensor whose first dimension (of size `rows`) is the
// batch: `state` is where its first value lies in the stream and `lane` that value's word within
// its Philox block (0 unless a slice starts mid-block). Outside a slice: g.reserve of the values'
// blocks, lane 0. Inside one: rows must equal the slice's rows (else ValueError naming `op`).
struct RowDraw {
  PhiloxState state;
  int64_t lane = 0;
};
RowDraw reserve_rows(Generator& g, int64_t rows, int64_t per_row, const char* op);

}  // namespace gradus
