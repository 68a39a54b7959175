// Reductions on CUDA against the CPU backend: every ReduceOp over row, column, mixed and full
// reductions (short rows by warps, long rows by split blocks, columns), strided inputs, ties and
// NaN for argmax / max, integer and bool inputs.
#include "gpu/gpu_test_util.h"

namespace gradus {
namespace {

using namespace gpu_test;
using backend::ReduceOp;

const ReduceOp kAll[] = {ReduceOp::sum,       ReduceOp::mean, ReduceOp::prod,
                         ReduceOp::max,       ReduceOp::min,  ReduceOp::sum_squares,
                         ReduceOp::logsumexp, ReduceOp::any,  ReduceOp::all};

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims) {
  Shape o = s;
  for (int64_t d : dims) o[static_cast<size_t>(d)] = 1;
  return o;
}

DType out_dtype(ReduceOp op, DType in) {
  if (op == ReduceOp::any || op == ReduceOp::all) return DType::boolean;
  if (op == ReduceOp::argmax || op == ReduceOp::argmin) return DType::i64;
  return in;
}

void check(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool strided) {
  const DType ot = out_dtype(op, x.dtype());
  const Shape os = reduced_shape(x.sizes(), dims);
  const Tensor expect = poisoned(os, ot, Device::cpu());
  cpu().reduce(op, x, expect, dims);
  const Tensor xg = strided ? strided_copy(x, cuda0(), x.dim() == 2) : x.to(cuda0());
  const Tensor out = poisoned(os, ot, cuda0());
  gpu().reduce(op, xg, out, dims);
  // prod of many values in [0.5, 1.5) spans a wide range: relative comparison only.
  const double t = is_floating(ot) ? std::max(tol(ot), 1e-6) : 0.0;
  EXPECT_TRUE(op == ReduceOp::prod ? close(out, expect, t * 4, 0.0) : close(out, expect, t * 4))
      << "op " << static_cast<int>(op) << " " << dtype_name(x.dtype()) << " "
      << shape_str(x.sizes()) << " strided " << strided;
}

struct Problem {
  Shape shape;
  std::vector<int64_t> dims;
};

const Problem kProblems[] = {
    {{7, 1000}, {1}},        // warp rows
    {{3, 200003}, {1}},      // long rows, split over blocks
    {{100003, 3}, {0}},      // columns
    {{4000, 65}, {0}},       // columns, split
    {{64, 33, 17}, {0, 2}},  // mixed
    {{1 << 21}, {0}},        // full reduction, split
    {{5, 6, 7, 8}, {1, 3}},  // strided kept dims
    {{1, 1, 9}, {0, 1}},     // reducing only size-1 dims
};

TEST(CudaReduce, AllOpsFloat) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const Problem& p : kProblems) {
      for (ReduceOp op : kAll) {
        const bool prod = op == ReduceOp::prod;
        const Tensor x = rnd(p.shape, t, prod ? 0.9 : -2.0, prod ? 1.1 : 2.0);
        check(op, x, p.dims, false);
        if (p.shape.size() <= 3) check(op, x, p.dims, true);
      }
    }
  }
}

TEST(CudaReduce, ArgExtremaFirstIndexWithTiesAndNaN) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::bf16, DType::f64}) {
    for (const Problem& p : {Problem{{37, 1000}, {1}}, Problem{{3, 300001}, {1}},
                             Problem{{5000, 70}, {0}}, Problem{{11, 13, 17}, {1}}}) {
      // Small integers: many ties, so "first index" matters.
      const Tensor x = rnd_int(p.shape, t, -5, 5);
      check(ReduceOp::argmax, x, p.dims, false);
      check(ReduceOp::argmin, x, p.dims, true);
      check(ReduceOp::max, x, p.dims, false);
    }
  }
  // NaN is the extreme and the first NaN wins.
  Tensor x = rnd({4, 5000}, DType::f32);
  std::vector<float> v = x.to_vector<float>();
  v[123] = NAN;
  v[4000] = NAN;
  v[5000 + 17] = NAN;
  v[15000 + 4999] = NAN;
  x = from_vector(v, {4, 5000}, {DType::f32});
  for (ReduceOp op : {ReduceOp::argmax, ReduceOp::argmin, ReduceOp::max, ReduceOp::min,
                      ReduceOp::sum, ReduceOp::logsumexp}) {
    check(op, x, {1}, false);
  }
}

TEST(CudaReduce, IntegersAndBool) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::i32, DType::i64, DType::u8}) {
    const Tensor x = rnd_int({301, 517}, t, 0, 7);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min, ReduceOp::argmax,
                        ReduceOp::any, ReduceOp::all, ReduceOp::sum_squares}) {
      for (const std::vector<int64_t>& dims : {std::vector<int64_t>{0}, {1}, {0, 1}}) {
        if ((op == ReduceOp::argmax) && dims.size() != 1) continue;
        const DType ot =
            op == ReduceOp::sum || op == ReduceOp::sum_squares ? DType::i64 : out_dtype(op, t);
        const Shape os = reduced_shape(x.sizes(), dims);
        const Tensor expect = poisoned(os, ot, Device::cpu());
        cpu().reduce(op, x, expect, dims);
        const Tensor out = poisoned(os, ot, cuda0());
        gpu().reduce(op, x.to(cuda0()), out, dims);
        EXPECT_TRUE(identical(out, expect))
            << "op " << static_cast<int>(op) << " " << dtype_name(t);
      }
    }
  }
  const Tensor b = gt(rnd({999, 33}, DType::f32), 0.95);
  for (ReduceOp op : {ReduceOp::any, ReduceOp::all}) {
    for (int64_t d : {0, 1}) {
      const Tensor expect = poisoned(reduced_shape(b.sizes(), {d}), DType::boolean, Device::cpu());
      cpu().reduce(op, b, expect, {d});
      const Tensor out = poisoned(reduced_shape(b.sizes(), {d}), DType::boolean, cuda0());
      gpu().reduce(op, b.to(cuda0()), out, {d});
      EXPECT_TRUE(identical(out, expect));
    }
  }
}

TEST(CudaReduce, ManyDimsFallBackToPermutedCopy) {
  GRADUS_REQUIRE_GPU();
  const Shape s = {2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3};  // 18 dims
  const Tensor x = rnd(s, DType::f32);
  check(ReduceOp::sum, x, {0, 2, 4, 6, 8, 10, 12, 14, 16}, false);
  check(ReduceOp::max, x, {1, 3, 5, 7, 9, 11, 13, 15, 17}, false);
}

TEST(CudaReduce, EmptyInputsGiveIdentities) {
  GRADUS_REQUIRE_GPU();
  const Tensor x = empty({0, 5}, {DType::f32, cuda0()});
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::logsumexp}) {
    const Tensor expect = poisoned({1, 5}, DType::f32, Device::cpu());
    cpu().reduce(op, empty({0, 5}, {DType::f32}), expect, {0});
    const Tensor out = poisoned({1, 5}, DType::f32, cuda0());
    gpu().reduce(op, x, out, {0});
    EXPECT_TRUE(identical(out, expect));
  }
}

}  // namespace
}  // namespace gradus
