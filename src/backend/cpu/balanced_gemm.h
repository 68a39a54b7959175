// Plain float32 products on oneDNN's sgemm, cut between the threads by their measured speed.
//
// A product cut into equal parts, one per thread (as oneDNN's and OpenBLAS's own threading cut
// it), takes as long as its slowest thread. On a shared virtual machine one vCPU can run at two
// thirds of the other's speed for minutes (a neighbour on its host core; docs/performance.md),
// and a training step that is three quarters GEMMs then runs at the slow vCPU's pace. Here each
// thread computes one block of C's rows (of its columns, when C is wider than tall) with a
// single-threaded sgemm, the blocks sized by each thread's share of the team's speed as measured
// on the products before. When the threads run evenly the cut is even, as before.
//
// A row of C comes out bitwise the same whichever block it falls in (sgemm never splits K, and its
// K blocking does not depend on the block's rows or columns; a test holds it to that), so the
// product does not depend on the cut, the speeds or the thread count.
#pragma once

#include "backend/backend.h"

namespace gradus::backend::cpu {

// out = alpha * op(a) @ op(b) + beta * out as above, where the product qualifies: float32 on
// oneDNN's AVX-512 path (onednn_f32_gemm()), no bias or activation, a single matrix (batch 1),
// every operand BLAS-readable, a row-major output, at least onednn_f32_min_work() multiply-adds,
// and GRADUS_BALANCED_GEMM is not "0". False, with nothing written, otherwise. Whether a product
// qualifies does not depend on the thread count.
bool balanced_sgemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args);

// For tests: the same with the cut given (one share per thread of the calling team, summing to
// 1) instead of the measured one; nothing is timed.
bool balanced_sgemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args,
                    const std::vector<double>& shares);

// Each thread's share of the next cut for a team of `threads` (they sum to 1; equal for a team of
// a new size, until its products have been timed). For tests and diagnostics.
std::vector<double> balanced_gemm_shares(int threads);

// What balanced_sgemm records after a timed product: thread t computed sizes[t] rows (or
// columns) in seconds[t]. Each share moves halfway to the thread's part of the measured speed,
// and none falls below a tenth of an even share (so every thread keeps some work and stays
// measured). Public for tests.
void record_balanced_gemm_timing(const std::vector<int64_t>& sizes,
                                 const std::vector<double>& seconds);

}  // namespace gradus::backend::cpu
