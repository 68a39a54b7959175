// Helpers for the tests that run under mpirun (label dist): every rank runs every test, and a
// test draws its inputs from a seed that rank 0 picks fresh and broadcasts.
#pragma once

#include <cstdint>

#include "gradus/dist/dist.h"
#include "support/test_util.h"

namespace gradus::testing {

// A fresh seed, the same on every rank.
inline uint64_t shared_seed() {
  Tensor s = from_vector(std::vector<int64_t>{static_cast<int64_t>(fresh_seed() >> 1)}, {1},
                         {.dtype = DType::i64});
  dist::default_group()->broadcast(s, 0, "test seed")->wait();
  return static_cast<uint64_t>(s.to_vector<int64_t>()[0]);
}

// Seed of rank r's input in a test (every rank can rebuild every other rank's input).
inline uint64_t rank_seed(uint64_t seed, int r) {
  return seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(r) * 7919u + 1u;
}

}  // namespace gradus::testing
