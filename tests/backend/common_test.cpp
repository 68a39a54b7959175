// The device-neutral tables and helpers both backends share (src/backend/common): every
// enumerator of the backend's op enums has its row under its own name, the dtype rules match what
// the public ops return, dimension merging and the BLAS matrix descriptions.
#include <gtest/gtest.h>

#include <cmath>
#include <string_view>
#include <utility>

#include "backend/common/layout.h"
#include "backend/common/op_meta.h"
#include "gradus/gradus.h"

namespace gradus {
namespace {

using backend::BinaryOp;
using backend::ReduceOp;
using backend::TernaryOp;
using backend::UnaryOp;
namespace common = backend::common;

// How the compiler spells enum value V: "gradus::backend::UnaryOp::neg" for an enumerator,
// "(gradus::backend::UnaryOp)35" for a value no enumerator has.
template <auto V>
constexpr std::string_view spelling() {
  const std::string_view f = __PRETTY_FUNCTION__;
  const size_t start = f.find("V = ") + 4;
  return f.substr(start, f.find_first_of(";]", start) - start);
}

std::string_view enumerator_name(std::string_view spelled) {
  return spelled.substr(spelled.rfind("::") + 2);
}

void expect_row_name(std::string_view row_name, std::string_view spelled) {
  EXPECT_EQ(row_name, enumerator_name(spelled)) << "the row for " << spelled;
}

template <typename Table, size_t... I>
void expect_rows_name_their_enumerators(const Table& table, std::index_sequence<I...>) {
  using E = std::remove_cvref_t<decltype(table[0].op)>;
  (expect_row_name(table[I].name, spelling<static_cast<E>(I)>()), ...);
  // One past the last row is no enumerator: an op appended to the enum without a row fails here.
  constexpr std::string_view past = spelling<static_cast<E>(sizeof...(I))>();
  EXPECT_EQ(past.front(), '(') << "enumerator " << past << " has no row in op_meta.h";
}

template <typename Table>
void check_table(const Table& table) {
  static_assert(std::tuple_size_v<Table> > 0);
  expect_rows_name_their_enumerators(table, std::make_index_sequence<std::tuple_size_v<Table>>());
}

TEST(BackendCommon, EveryEnumeratorHasItsRowUnderItsName) {
  ASSERT_EQ(spelling<UnaryOp::neg>(), "gradus::backend::UnaryOp::neg");  // the spelling works
  check_table(common::kUnaryOps);
  check_table(common::kBinaryOps);
  check_table(common::kTernaryOps);
  check_table(common::kReduceOps);
  EXPECT_EQ(common::op_name(BinaryOp::logical_xor), "logical_xor");
  EXPECT_EQ(common::op_name(ReduceOp::argmin), "argmin");
}

// The table's output rules are the dtypes the public ops produce (the op layer allocates the
// outputs the kernels then fill).
TEST(BackendCommon, OutputDTypeRulesMatchThePublicOps) {
  const Tensor a = tensor({1.0, 2.0, 3.0}), b = tensor({3.0, 2.0, 1.0});
  const std::pair<BinaryOp, Tensor> binary[] = {{BinaryOp::eq, eq(a, b)},
                                                {BinaryOp::ne, ne(a, b)},
                                                {BinaryOp::lt, lt(a, b)},
                                                {BinaryOp::le, le(a, b)},
                                                {BinaryOp::gt, gt(a, b)},
                                                {BinaryOp::ge, ge(a, b)},
                                                {BinaryOp::logical_and, logical_and(a, b)},
                                                {BinaryOp::logical_or, logical_or(a, b)},
                                                {BinaryOp::logical_xor, logical_xor(a, b)},
                                                {BinaryOp::add, add(a, b)},
                                                {BinaryOp::maximum, maximum(a, b)},
                                                {BinaryOp::atan2, atan2(a, b)}};
  int predicates = 0;
  for (const auto& [op, out] : binary) {
    EXPECT_EQ(common::output_dtype(op, a.dtype()), out.dtype()) << common::op_name(op);
    predicates += common::is_predicate(op);
  }
  EXPECT_EQ(predicates, 9);
  int all_predicates = 0;
  for (const auto& row : common::kBinaryOps) all_predicates += common::is_predicate(row.op);
  EXPECT_EQ(all_predicates, 9);  // the comparisons and the three logical ops, nothing else

  const std::pair<UnaryOp, Tensor> unary[] = {{UnaryOp::logical_not, logical_not(a)},
                                              {UnaryOp::isnan, isnan(a)},
                                              {UnaryOp::isinf, isinf(a)},
                                              {UnaryOp::exp, exp(a)},
                                              {UnaryOp::abs, abs(a)}};
  for (const auto& [op, out] : unary) {
    EXPECT_EQ(common::output_dtype(op, a.dtype()), out.dtype()) << common::op_name(op);
  }
  EXPECT_EQ(common::output_dtype(ReduceOp::argmax, DType::f32), argmax(a, 0).dtype());
  EXPECT_EQ(common::output_dtype(ReduceOp::any, DType::f32), DType::boolean);
  EXPECT_EQ(common::output_dtype(ReduceOp::sum, a.dtype()), sum(a).dtype());
  EXPECT_EQ(common::output_dtype(TernaryOp::where, DType::f16), DType::f16);
}

// Reductions over nothing give PyTorch's values on the CPU backend, read from the table.
TEST(BackendCommon, EmptyReductionValues) {
  const Tensor e = zeros({0, 3});
  EXPECT_EQ(sum(e, {0}).to(DType::f64).sum().item(), 0.0);
  EXPECT_EQ(prod(e, {0}).to(DType::f64).sum().item(), 3.0);
  EXPECT_TRUE(std::isinf(logsumexp(e, {0}).to(DType::f64).sum().item()));
  EXPECT_EQ(common::empty_reduction_value(ReduceOp::all), 1.0);
  EXPECT_EQ(common::empty_reduction_value(ReduceOp::any), 0.0);
  EXPECT_TRUE(std::isnan(common::empty_reduction_value(ReduceOp::mean)));
}

TEST(BackendCommon, CoalesceDimsMergesWhereEveryOperandAllows) {
  // Contiguous [2, 3, 4] with a broadcast [4] operand: one dim of 24 needs stride 0 throughout,
  // which the broadcast row has only over its inner dim.
  const Tensor out = empty({2, 3, 4});
  const Tensor same = empty({2, 3, 4});
  common::CoalescedDims<2> c = common::coalesce_dims<2>(out.sizes(), {&out, &same}, {1, 1});
  ASSERT_EQ(c.sizes, (std::vector<int64_t>{24}));
  EXPECT_EQ(c.strides[0], (std::array<int64_t, 2>{1, 1}));

  const Tensor row = empty({4}).expand({2, 3, 4});                  // strides {0, 0, 1}
  c = common::coalesce_dims<2>(out.sizes(), {&out, &row}, {4, 4});  // byte strides of f32
  ASSERT_EQ(c.sizes, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(c.strides[0], (std::array<int64_t, 2>{16, 0}));
  EXPECT_EQ(c.strides[1], (std::array<int64_t, 2>{4, 4}));

  // A transposed operand keeps every dim apart; size-1 dims are dropped.
  const Tensor t = empty({4, 1, 3}).permute({2, 1, 0});  // [3, 1, 4], strides {1, 3, 3}
  const Tensor o2 = empty({3, 1, 4});
  common::CoalescedDims<2> d = common::coalesce_dims<2>(o2.sizes(), {&o2, &t}, {1, 1});
  ASSERT_EQ(d.sizes, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(d.strides[0], (std::array<int64_t, 2>{4, 1}));
  EXPECT_EQ(d.strides[1], (std::array<int64_t, 2>{1, 3}));

  // A scalar shape has no dims at all.
  const Tensor s = empty({});
  EXPECT_TRUE((common::coalesce_dims<1>(s.sizes(), {&s}, {1}).sizes.empty()));
}

TEST(BackendCommon, CoalesceAxesOfAReduction) {
  // Summing a contiguous [2, 3, 4, 5] over {1, 2}: the reduced axes merge into one of 12.
  const std::vector<common::ReduceAxis> red = {{3, 20, 0}, {4, 5, 0}};
  const std::vector<common::ReduceAxis> merged = common::coalesce_axes(red);
  ASSERT_EQ(merged.size(), 1u);
  EXPECT_EQ(merged[0].size, 12);
  EXPECT_EQ(merged[0].xs, 5);
  // Kept axes whose output strides do not line up stay apart; size 1 is dropped.
  const std::vector<common::ReduceAxis> kept = {{2, 60, 1}, {1, 60, 1}, {5, 1, 2}};
  const std::vector<common::ReduceAxis> k = common::coalesce_axes(kept);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].size, 2);
  EXPECT_EQ(k[1].size, 5);
}

TEST(BackendCommon, BlasMatrixDescriptions) {
  common::BlasMatrix m;
  // Row-major [3, 4] with padded rows (leading dimension 6).
  ASSERT_TRUE(common::blas_matrix({1, 3, 4, 0, 6, 1}, m));
  EXPECT_FALSE(m.transposed);
  EXPECT_EQ(m.ld, 6);
  // Column-major [3, 4]: the row-major [4, 3] transpose with leading dimension 3.
  const Tensor cm = empty({4, 3}).t();
  const common::MatrixView v = common::matrix_view(cm);
  EXPECT_EQ(v.rows, 3);
  EXPECT_EQ(v.cols, 4);
  ASSERT_TRUE(common::blas_matrix(v, m));
  EXPECT_TRUE(m.transposed);
  EXPECT_EQ(m.ld, 3);
  // Neither layout: both strides above 1 (every other column of a matrix).
  EXPECT_FALSE(common::blas_matrix({1, 3, 4, 0, 8, 2}, m));
  // Rows that overlap (leading dimension below the row length) are not row-major.
  EXPECT_FALSE(common::blas_matrix({1, 3, 4, 0, 2, 1}, m));
  // A single row takes the smallest valid leading dimension whatever its row stride.
  ASSERT_TRUE(common::blas_matrix({1, 1, 5, 0, 0, 1}, m));
  EXPECT_FALSE(m.transposed);
  EXPECT_EQ(m.ld, 5);
  // A batch of one gets batch stride 0 (broadcast over the batch).
  EXPECT_EQ(common::matrix_view(empty({1, 2, 3})).bs, 0);
  EXPECT_EQ(common::matrix_view(empty({4, 2, 3})).bs, 6);
}

}  // namespace
}  // namespace gradus
