// gather / scatter_add / index_select / embedding / one_hot against naive references, with
// finite-difference gradients and range/dtype/shape errors.
#include "ops/gradcheck.h"

namespace gradus {
namespace {

using testing::fresh_seed;
using testing::grad_input;
using testing::gradcheck;
using testing::index_tensor;
using testing::random_ints;
using testing::random_tensor;
using testing::ravel;
using testing::unravel;
using testing::values_match;

std::vector<double> ref_gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const std::vector<double> xv = x.to_vector<double>();
  const std::vector<int64_t> iv = index.to_vector<int64_t>();
  std::vector<double> out;
  for (int64_t i = 0; i < index.numel(); ++i) {
    std::vector<int64_t> pos = unravel(i, index.sizes());
    pos[dim] = iv[i];
    out.push_back(xv[ravel(pos, x.sizes())]);
  }
  return out;
}

std::vector<double> ref_scatter_add(const Tensor& x, int64_t dim, const Tensor& index,
                                    const Tensor& src) {
  std::vector<double> out = x.to_vector<double>();
  const std::vector<double> sv = src.to_vector<double>();
  const std::vector<int64_t> iv = index.to_vector<int64_t>();
  for (int64_t i = 0; i < index.numel(); ++i) {
    std::vector<int64_t> pos = unravel(i, index.sizes());
    const int64_t s = ravel(pos, src.sizes());
    pos[dim] = iv[i];
    out[ravel(pos, x.sizes())] += sv[s];
  }
  return out;
}

TEST(Gather, MatchesReferenceAlongEachDim) {
  const uint64_t s = fresh_seed();
  const Tensor x = random_tensor({4, 5, 3}, s);
  for (int64_t dim = 0; dim < 3; ++dim) {
    // The index may be smaller than x in every dim and repeat positions.
    const Shape is{3, 4, 2};
    const Tensor idx = index_tensor(random_ints(shape_numel(is), 0, x.size(dim), s + dim), is);
    EXPECT_TRUE(values_match(gather(x, dim, idx), is, ref_gather(x, dim, idx)));
    EXPECT_TRUE(values_match(gather(x, dim - 3, idx.to(DType::i32)), is, ref_gather(x, dim, idx)));
  }
  // Non-contiguous x and index.
  const Tensor xt = random_tensor({5, 4}, s + 7).t();
  const Tensor it = index_tensor(random_ints(12, 0, 4, s + 8), {3, 4}).t();  // [4, 3]
  EXPECT_TRUE(values_match(gather(xt, 1, it), {4, 3}, ref_gather(xt, 1, it.contiguous())));
  // Empty index.
  EXPECT_TRUE(values_match(gather(x, 1, index_tensor({}, {0, 2, 3})), {0, 2, 3}, {}));
}

TEST(Gather, GradientScattersBack) {
  const uint64_t s = fresh_seed();
  const Tensor idx = index_tensor(random_ints(12, 0, 3, s), {4, 3});  // repeats likely
  EXPECT_TRUE(gradcheck([&](const auto& in) { return gather(in[0], 1, idx); },
                        {grad_input({5, 3}, s + 1)}));
  EXPECT_TRUE(gradcheck([&](const auto& in) { return gather(in[0], 0, idx); },
                        {grad_input({3, 4}, s + 2)}));
}

TEST(ScatterAdd, MatchesReferenceAndLeavesInputUntouched) {
  const uint64_t s = fresh_seed();
  const Tensor x = random_tensor({4, 5}, s);
  const std::vector<double> before = x.to_vector<double>();
  for (int64_t dim = 0; dim < 2; ++dim) {
    const Tensor idx = index_tensor(random_ints(6, 0, x.size(dim), s + 1 + dim), {3, 2});
    const Tensor src = random_tensor({3, 4}, s + 3 + dim);  // larger than index in dim 1
    EXPECT_TRUE(
        values_match(scatter_add(x, dim, idx, src), {4, 5}, ref_scatter_add(x, dim, idx, src)));
  }
  EXPECT_EQ(x.to_vector<double>(), before);
}

TEST(ScatterAdd, GradientsForInputAndSource) {
  const uint64_t s = fresh_seed();
  const Tensor idx = index_tensor(random_ints(6, 0, 4, s), {2, 3});
  EXPECT_TRUE(gradcheck([&](const auto& in) { return scatter_add(in[0], 0, idx, in[1]); },
                        {grad_input({4, 3}, s + 1), grad_input({3, 3}, s + 2)}));
}

TEST(IndexSelect, MatchesReferenceAlongEachDim) {
  const uint64_t s = fresh_seed();
  const Tensor x = random_tensor({4, 3, 5}, s);
  const std::vector<double> xv = x.to_vector<double>();
  for (int64_t dim = 0; dim < 3; ++dim) {
    const std::vector<int64_t> iv = random_ints(6, 0, x.size(dim), s + 1 + dim);
    Shape shape = x.sizes();
    shape[dim] = 6;
    std::vector<double> expect;
    for (int64_t i = 0; i < shape_numel(shape); ++i) {
      std::vector<int64_t> pos = unravel(i, shape);
      pos[dim] = iv[pos[dim]];
      expect.push_back(xv[ravel(pos, x.sizes())]);
    }
    EXPECT_TRUE(values_match(index_select(x, dim, index_tensor(iv, {6})), shape, expect));
    EXPECT_TRUE(values_match(
        index_select(x.transpose(0, 2).transpose(0, 2), dim, index_tensor(iv, {6}, DType::i32)),
        shape, expect));
  }
  // A non-contiguous source.
  const Tensor xt = random_tensor({5, 4}, s + 9).t();  // [4, 5]
  const std::vector<double> tv = xt.to_vector<double>();
  EXPECT_TRUE(
      values_match(index_select(xt, 0, index_tensor({3, 0}, {2})), {2, 5},
                   {tv[15], tv[16], tv[17], tv[18], tv[19], tv[0], tv[1], tv[2], tv[3], tv[4]}));
}

TEST(IndexSelect, Gradients) {
  const uint64_t s = fresh_seed();
  const Tensor idx = index_tensor({2, 0, 2, 1}, {4});  // a repeated row
  for (int64_t dim = 0; dim < 3; ++dim) {
    EXPECT_TRUE(gradcheck([&](const auto& in) { return index_select(in[0], dim, idx); },
                          {grad_input({3, 3, 3}, s + dim)}));
  }
}

TEST(Embedding, LooksUpRowsForAnyIndexShape) {
  const uint64_t s = fresh_seed();
  const Tensor w = random_tensor({10, 4}, s);
  const std::vector<double> wv = w.to_vector<double>();
  const std::vector<int64_t> iv = random_ints(6, 0, 10, s + 1);
  for (DType dt : {DType::i64, DType::i32}) {
    const Tensor out = embedding(w, index_tensor(iv, {2, 3}, dt));
    std::vector<double> expect;
    for (int64_t i : iv) expect.insert(expect.end(), wv.begin() + i * 4, wv.begin() + i * 4 + 4);
    EXPECT_TRUE(values_match(out, {2, 3, 4}, expect));
  }
  EXPECT_TRUE(
      values_match(embedding(w, index_tensor({7}, {})), {4}, {wv[28], wv[29], wv[30], wv[31]}));
  EXPECT_TRUE(values_match(embedding(w, index_tensor({}, {0})), {0, 4}, {}));
}

TEST(Embedding, GradientAccumulatesRepeatedRows) {
  const uint64_t s = fresh_seed();
  const Tensor idx = index_tensor({1, 3, 1, 1, 0, 3}, {2, 3});
  EXPECT_TRUE(
      gradcheck([&](const auto& in) { return embedding(in[0], idx); }, {grad_input({5, 2}, s)}));
  Tensor w = grad_input({5, 2}, s + 1);
  embedding(w, idx).sum().backward();
  EXPECT_TRUE(values_match(w.grad(), {5, 2}, {1, 1, 3, 3, 0, 0, 2, 2, 0, 0}));
}

TEST(OneHot, EncodesClasses) {
  const Tensor idx = index_tensor({2, 0, 1, 2}, {2, 2});
  const Tensor oh = one_hot(idx, 4);
  EXPECT_EQ(oh.dtype(), DType::i64);
  EXPECT_TRUE(values_match(oh, {2, 2, 4}, {0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}));
  EXPECT_TRUE(values_match(one_hot(idx), {2, 2, 3}, {0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 1}));
  const std::vector<int64_t> iv = random_ints(20, 0, 7, fresh_seed());
  const std::vector<double> got = one_hot(index_tensor(iv, {20}), 7).to_vector<double>();
  for (int i = 0; i < 20; ++i) {
    for (int c = 0; c < 7; ++c) EXPECT_EQ(got[i * 7 + c], iv[i] == c ? 1.0 : 0.0);
  }
}

TEST(IndexingErrors, RangeDtypeAndShape) {
  const Tensor x = random_tensor({3, 5}, fresh_seed());
  GRADUS_EXPECT_ERROR(gather(x, 1, index_tensor({0, 7}, {1, 2})), IndexError, "gather", "7",
                      "[0, 5)");
  GRADUS_EXPECT_ERROR(gather(x, 1, index_tensor({-1, 0}, {1, 2})), IndexError, "gather", "-1");
  GRADUS_EXPECT_ERROR(gather(x, 1, zeros({1, 2})), DTypeError, "gather", "float32");
  GRADUS_EXPECT_ERROR(gather(x, 1, index_tensor({0, 1}, {2})), ShapeError, "gather", "rank");
  GRADUS_EXPECT_ERROR(gather(x, 1, index_tensor(std::vector<int64_t>(4, 0), {4, 1})), ShapeError,
                      "gather", "dimension 0");
  GRADUS_EXPECT_ERROR(gather(x, 2, index_tensor({0}, {1, 1})), IndexError, "gather");
  GRADUS_EXPECT_ERROR(scatter_add(x, 0, index_tensor({3}, {1, 1}), random_tensor({1, 1}, 1)),
                      IndexError, "scatter_add", "3", "[0, 3)");
  GRADUS_EXPECT_ERROR(
      scatter_add(x, 0, index_tensor({0}, {1, 1}), random_tensor({1, 1}, 1, -1, 1, DType::f32)),
      DTypeError, "scatter_add");
  GRADUS_EXPECT_ERROR(index_select(x, 0, index_tensor({0, 3}, {2})), IndexError, "index_select",
                      "3", "[0, 3)");
  GRADUS_EXPECT_ERROR(index_select(x, 0, index_tensor({0, 1}, {1, 2})), ShapeError, "index_select");
  const Tensor w = random_tensor({10, 4}, fresh_seed());
  GRADUS_EXPECT_ERROR(embedding(w, index_tensor({1, 10}, {2})), IndexError, "embedding", "10",
                      "[0, 10)");
  GRADUS_EXPECT_ERROR(embedding(w, index_tensor({-2}, {1})), IndexError, "embedding", "-2");
  GRADUS_EXPECT_ERROR(embedding(w, zeros({2})), DTypeError, "embedding");
  GRADUS_EXPECT_ERROR(embedding(zeros({10}), index_tensor({1}, {1})), ShapeError, "embedding");
  GRADUS_EXPECT_ERROR(one_hot(index_tensor({}, {0})), ValueError, "one_hot", "empty");
  GRADUS_EXPECT_ERROR(one_hot(index_tensor({1, 4}, {2}), 3), IndexError, "one_hot", "4");
  GRADUS_EXPECT_ERROR(one_hot(index_tensor({-1}, {1}), 3), IndexError, "one_hot", "-1");
}

}  // namespace
}  // namespace gradus
