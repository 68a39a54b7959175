#include "gradus/core/random.h"

#include "gradus/core/error.h"

namespace gradus {

Generator& default_generator() {
  static Generator gen(0x5eed);
  return gen;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

namespace {
thread_local BatchSlice t_slice;
thread_local bool t_in_slice = false;
}  // namespace

BatchSliceGuard::BatchSliceGuard(BatchSlice slice) : previous_(t_slice), had_previous_(t_in_slice) {
  GRADUS_CHECK(slice.rows >= 0 && slice.begin >= 0 && slice.begin + slice.rows <= slice.total_rows,
               ValueError, "BatchSliceGuard: rows [", slice.begin, ", ", slice.begin + slice.rows,
               ") are not inside a batch of ", slice.total_rows);
  t_slice = slice;
  t_in_slice = true;
}

BatchSliceGuard::~BatchSliceGuard() {
  t_slice = previous_;
  t_in_slice = had_previous_;
}

const BatchSlice* current_batch_slice() {
  return t_in_slice ? &t_slice : nullptr;
}

RowDraw reserve_rows(Generator& g, int64_t rows, int64_t per_row, const char* op) {
  const BatchSlice* slice = current_batch_slice();
  if (slice == nullptr) return {g.reserve(static_cast<uint64_t>((rows * per_row + 3) / 4)), 0};
  GRADUS_CHECK(rows == slice->rows, ValueError, op, ": inside a micro-batch of ", slice->rows,
               " rows (pipeline parallelism) the input's first dimension must be the batch, got ",
               rows, "; the random draw could not match the whole batch's");
  PhiloxState s = g.reserve(static_cast<uint64_t>((slice->total_rows * per_row + 3) / 4));
  const int64_t first = slice->begin * per_row;
  s.offset += static_cast<uint64_t>(first / 4);
  return {s, first % 4};
}

}  // namespace gradus
