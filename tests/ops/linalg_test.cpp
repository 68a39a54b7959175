// matmul / mm / bmm / linear against a naive float64 NumPy-semantics reference, gradients by
// finite differences, and the error messages.
#include <utility>

#include "ops/gradcheck.h"

namespace gradus {
namespace {

using testing::all_close;
using testing::fresh_seed;
using testing::grad_input;
using testing::gradcheck;
using testing::random_tensor;
using testing::values_match;

// Index into a batch operand of shape `batch_of` (right-aligned, size-1 dims broadcast) from a
// multi-index over the broadcast batch shape.
int64_t batch_offset(const std::vector<int64_t>& bidx, const Shape& batch_of) {
  const size_t lead = bidx.size() - batch_of.size();
  int64_t flat = 0;
  for (size_t d = 0; d < batch_of.size(); ++d) {
    flat = flat * batch_of[d] + (batch_of[d] == 1 ? 0 : bidx[lead + d]);
  }
  return flat;
}

// NumPy matmul computed naively on host values.
std::pair<Shape, std::vector<double>> ref_matmul(const Tensor& a, const Tensor& b) {
  Shape as = a.sizes(), bs = b.sizes();
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const Shape batch = broadcast_shapes(ab, bb, "ref");
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  const int64_t nb = shape_numel(batch);
  std::vector<double> out(static_cast<size_t>(nb * m * n), 0.0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    const std::vector<int64_t> bidx = testing::unravel(bi, batch);
    const int64_t ao = batch_offset(bidx, ab) * m * k, bo = batch_offset(bidx, bb) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += av[ao + i * k + p] * bv[bo + p * n + j];
        out[(bi * m + i) * n + j] = acc;
      }
    }
  }
  Shape shape = batch;
  if (!a1) shape.push_back(m);
  if (!b1) shape.push_back(n);
  return {shape, out};
}

void expect_matmul(const Tensor& a, const Tensor& b, double rtol = 1e-10, double atol = 1e-12) {
  const auto [shape, expected] = ref_matmul(a, b);
  EXPECT_TRUE(values_match(matmul(a, b), shape, expected, rtol, atol))
      << shape_str(a.sizes()) << " @ " << shape_str(b.sizes());
}

TEST(Matmul, ShapesFollowNumPyRules) {
  const uint64_t s = fresh_seed();
  const std::vector<std::pair<Shape, Shape>> cases = {{{3, 4}, {4, 5}},
                                                      {{4}, {4}},
                                                      {{4}, {4, 5}},
                                                      {{3, 4}, {4}},
                                                      {{2, 3, 4}, {4, 5}},
                                                      {{3, 4}, {2, 4, 5}},
                                                      {{2, 1, 3, 4}, {5, 4, 2}},
                                                      {{2, 3, 4}, {4}},
                                                      {{4}, {2, 4, 3}},
                                                      {{1, 4}, {4, 1}},
                                                      {{1, 1}, {1, 1}},
                                                      {{2, 3, 1, 4}, {3, 4, 6}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    expect_matmul(random_tensor(cases[i].first, s + 2 * i),
                  random_tensor(cases[i].second, s + 2 * i + 1));
  }
}

TEST(Matmul, NonContiguousOperands) {
  const uint64_t s = fresh_seed();
  const Tensor at = random_tensor({4, 3}, s).t();      // [3, 4], column-major
  const Tensor bt = random_tensor({5, 4}, s + 1).t();  // [4, 5], column-major
  expect_matmul(at, bt);
  // Row stride > cols (sliced columns) and a non-unit inner stride (stepped slice).
  const Tensor wide = random_tensor({3, 9}, s + 2).slice(1, 2, 6);          // [3, 4]
  const Tensor stepped = random_tensor({4, 10}, s + 3).slice(1, 0, 10, 2);  // [4, 5], stride 2
  expect_matmul(wide, stepped);
  // Batched transposed views, and a stride-0 broadcast batch.
  const Tensor bat = random_tensor({2, 4, 3}, s + 4).transpose(1, 2);  // [2, 3, 4]
  const Tensor bb = random_tensor({1, 4, 5}, s + 5).expand({2, 4, 5});
  expect_matmul(bat, bb);
  // Batch dims that cannot be merged into one stride ([2, 3] from [2, 1] expanded).
  const Tensor a4 = random_tensor({2, 1, 3, 4}, s + 6).expand({2, 3, 3, 4});
  expect_matmul(a4, random_tensor({3, 4, 2}, s + 7));
  // A 1-D strided vector.
  expect_matmul(random_tensor({8}, s + 8).slice(0, 0, 8, 2), random_tensor({4, 3}, s + 9));
}

TEST(Matmul, EmptyAndZeroInnerDimension) {
  const uint64_t s = fresh_seed();
  EXPECT_TRUE(values_match(matmul(random_tensor({0, 4}, s), random_tensor({4, 5}, s)), {0, 5}, {}));
  const Tensor z = matmul(random_tensor({3, 0}, s), random_tensor({0, 2}, s));
  EXPECT_TRUE(values_match(z, {3, 2}, std::vector<double>(6, 0.0)));
  EXPECT_TRUE(
      values_match(matmul(random_tensor({0, 3, 4}, s), random_tensor({4, 2}, s)), {0, 3, 2}, {}));
}

TEST(Matmul, Float32MatchesFloat64Reference) {
  const uint64_t s = fresh_seed();
  const Tensor a = random_tensor({2, 33, 65}, s).to(DType::f32);
  const Tensor b = random_tensor({65, 17}, s + 1).to(DType::f32);
  const Tensor out = matmul(a, b);
  EXPECT_EQ(out.dtype(), DType::f32);
  const auto [shape, expected] = ref_matmul(a.to(DType::f64), b.to(DType::f64));
  EXPECT_TRUE(values_match(out, shape, expected, 1e-5, 1e-5));
}

TEST(Matmul, MmAndBmm) {
  const uint64_t s = fresh_seed();
  const Tensor a = random_tensor({3, 4}, s), b = random_tensor({4, 2}, s + 1);
  auto [shape, expected] = ref_matmul(a, b);
  EXPECT_TRUE(values_match(mm(a, b), shape, expected));
  const Tensor ba = random_tensor({5, 3, 4}, s + 2), bb = random_tensor({5, 4, 2}, s + 3);
  std::tie(shape, expected) = ref_matmul(ba, bb);
  EXPECT_TRUE(values_match(bmm(ba, bb), shape, expected));
}

TEST(MatmulGrad, FiniteDifferences) {
  const uint64_t s = fresh_seed();
  const std::vector<std::pair<Shape, Shape>> cases = {{{3, 4}, {4, 2}},
                                                      {{4}, {4}},
                                                      {{4}, {4, 2}},
                                                      {{3, 4}, {4}},
                                                      {{2, 3, 4}, {4, 2}},
                                                      {{3, 4}, {2, 4, 2}},
                                                      {{2, 1, 2, 3}, {3, 3, 2}}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(shape_str(cases[i].first) + " @ " + shape_str(cases[i].second));
    EXPECT_TRUE(gradcheck(
        [](const auto& in) { return matmul(in[0], in[1]); },
        {grad_input(cases[i].first, s + 2 * i), grad_input(cases[i].second, s + 2 * i + 1)}));
  }
  // Transposed operands: gradients flow back through the views.
  EXPECT_TRUE(gradcheck([](const auto& in) { return matmul(in[0].t(), in[1].t()); },
                        {grad_input({4, 3}, s + 40), grad_input({2, 4}, s + 41)}));
  EXPECT_TRUE(gradcheck([](const auto& in) { return bmm(in[0], in[1].transpose(1, 2)); },
                        {grad_input({2, 3, 4}, s + 42), grad_input({2, 5, 4}, s + 43)}));
}

TEST(MatmulErrors, ClearTypedErrors) {
  const Tensor a = zeros({32, 784}), b = zeros({128, 10});
  try {
    matmul(a, b);
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "matmul: inner dimensions differ: [32, 784] @ [128, 10] (784 vs 128)");
  }
  GRADUS_EXPECT_ERROR(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})), ShapeError, "matmul", "batch");
  GRADUS_EXPECT_ERROR(matmul(scalar_tensor(1.0), zeros({3})), ShapeError, "matmul", "[]");
  GRADUS_EXPECT_ERROR(
      matmul(zeros({2, 2}, {.dtype = DType::i64}), zeros({2, 2}, {.dtype = DType::i64})),
      DTypeError, "matmul", "int64");
  GRADUS_EXPECT_ERROR(matmul(zeros({2, 2}), zeros({2, 2}, {.dtype = DType::f64})), DTypeError,
                      "matmul", "float32", "float64");
  GRADUS_EXPECT_ERROR(mm(zeros({2, 2, 2}), zeros({2, 2})), ShapeError, "mm", "2-D");
  GRADUS_EXPECT_ERROR(mm(zeros({2, 3}), zeros({2, 3})), ShapeError, "mm", "(3 vs 2)");
  GRADUS_EXPECT_ERROR(bmm(zeros({2, 2, 3}), zeros({3, 3, 2})), ShapeError, "bmm", "batch");
  GRADUS_EXPECT_ERROR(bmm(zeros({2, 3}), zeros({2, 3, 2})), ShapeError, "bmm", "3-D");
  if (cuda_device_count() > 0) {
    GRADUS_EXPECT_ERROR(matmul(zeros({2, 2}), zeros({2, 2}, {.device = Device::cuda()})),
                        DeviceError, "matmul");
  }
}

// ---------------------------------------------------------------------------------- linear
std::vector<double> ref_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const int64_t in = w.size(1), out = w.size(0);
  const int64_t rows =
      x.dim() == 1 ? 1 : shape_numel(Shape(x.sizes().begin(), x.sizes().end() - 1));
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.defined() ? bv[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += xv[r * in + i] * wv[o * in + i];
      y[r * out + o] = acc;
    }
  }
  return y;
}

TEST(Linear, MatchesReferenceForAnyInputRank) {
  const uint64_t s = fresh_seed();
  const Tensor w = random_tensor({3, 5}, s), b = random_tensor({3}, s + 1);
  const std::vector<Shape> shapes = {{6, 5}, {2, 3, 5}, {5}, {1, 5}, {2, 1, 2, 5}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Tensor x = random_tensor(shapes[i], s + 2 + i);
    Shape out_shape = shapes[i];
    out_shape.back() = 3;
    EXPECT_TRUE(values_match(linear(x, w, b), out_shape, ref_linear(x, w, b)));
    EXPECT_TRUE(values_match(linear(x, w), out_shape, ref_linear(x, w, Tensor())));
  }
  // Transposed input and a transposed weight (views, no copies needed).
  const Tensor xt = random_tensor({5, 4}, s + 10).t();
  const Tensor wt = random_tensor({5, 3}, s + 11).t();
  EXPECT_TRUE(values_match(linear(xt, wt, b), {4, 3}, ref_linear(xt, wt, b)));
  // A 3-D non-contiguous input.
  const Tensor x3 = random_tensor({2, 5, 3}, s + 12).transpose(1, 2);
  EXPECT_TRUE(values_match(linear(x3, w, b), {2, 3, 3}, ref_linear(x3, w, b)));
  // Empty batch and zero input features.
  EXPECT_TRUE(values_match(linear(random_tensor({0, 5}, s), w, b), {0, 3}, {}));
  const Tensor w0 = zeros({3, 0}, {.dtype = DType::f64});
  EXPECT_TRUE(values_match(linear(zeros({2, 0}, {.dtype = DType::f64}), w0, b), {2, 3},
                           ref_linear(zeros({2, 0}, {.dtype = DType::f64}), w0, b)));
}

TEST(Linear, Float32) {
  const uint64_t s = fresh_seed();
  const Tensor x = random_tensor({64, 100}, s).to(DType::f32);
  const Tensor w = random_tensor({30, 100}, s + 1).to(DType::f32);
  const Tensor b = random_tensor({30}, s + 2).to(DType::f32);
  EXPECT_TRUE(values_match(linear(x, w, b), {64, 30},
                           ref_linear(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64)), 1e-5,
                           1e-5));
}

TEST(LinearGrad, FiniteDifferences) {
  const uint64_t s = fresh_seed();
  for (const Shape& xs : std::vector<Shape>{{4, 5}, {2, 3, 5}, {5}}) {
    SCOPED_TRACE(shape_str(xs));
    EXPECT_TRUE(gradcheck([](const auto& in) { return linear(in[0], in[1], in[2]); },
                          {grad_input(xs, s), grad_input({3, 5}, s + 1), grad_input({3}, s + 2)}));
    EXPECT_TRUE(gradcheck([](const auto& in) { return linear(in[0], in[1]); },
                          {grad_input(xs, s + 3), grad_input({3, 5}, s + 4)}));
  }
  // Only some inputs require grad (the first layer's input never does).
  EXPECT_TRUE(
      gradcheck([](const auto& in) { return linear(in[0], in[1], in[2]); },
                {random_tensor({4, 5}, s + 5), grad_input({3, 5}, s + 6), grad_input({3}, s + 7)}));
  // Transposed input/weight views.
  EXPECT_TRUE(
      gradcheck([](const auto& in) { return linear(in[0].t(), in[1].t(), in[2]); },
                {grad_input({5, 4}, s + 8), grad_input({5, 3}, s + 9), grad_input({3}, s + 10)}));
  // An upstream gradient with stride 0 (sum's backward expands a scalar).
  Tensor x = grad_input({4, 5}, s + 11), w = grad_input({3, 5}, s + 12);
  linear(x, w).sum().backward();
  std::vector<double> wsum(5, 0.0);
  const std::vector<double> wv = w.to_vector<double>();
  for (int o = 0; o < 3; ++o) {
    for (int i = 0; i < 5; ++i) wsum[i] += wv[o * 5 + i];
  }
  std::vector<double> expect;
  for (int r = 0; r < 4; ++r) expect.insert(expect.end(), wsum.begin(), wsum.end());
  EXPECT_TRUE(values_match(x.grad(), {4, 5}, expect));
}

// linears against one linear per map, float32 at the Llama's projection shapes (q, k, v and a
// SwiGLU's gate and up): the same outputs bitwise (the same GEMMs), the same weight and bias
// gradients, and x's gradient summed inside the GEMMs within float32 rounding of the sum of the
// maps' gradients. A map whose output is not used passes zeros (its weight's gradient is zeros,
// where linear would leave it undefined).
TEST(Linears, MatchOneLinearPerMapAndSumTheInputGradientInPlace) {
  const uint64_t s = fresh_seed();
  const TensorOptions f32{.dtype = DType::f32};
  const std::vector<std::pair<std::vector<int64_t>, bool>> cases{{{96, 24, 24}, true},
                                                                 {{176, 176}, false}};
  for (const auto& [outs, use_all] : cases) {
    const Tensor x0 = random_tensor({2, 16, 64}, s).to(DType::f32);
    std::vector<Tensor> w0, b0;
    for (size_t i = 0; i < outs.size(); ++i) {
      w0.push_back(random_tensor({outs[i], 64}, s + 1 + i).to(DType::f32));
      b0.push_back(i == 1 ? Tensor() : random_tensor({outs[i]}, s + 10 + i).to(DType::f32));
    }
    auto leaves = [&](std::vector<Tensor>& w, std::vector<Tensor>& b) {
      for (size_t i = 0; i < outs.size(); ++i) {
        w.push_back(w0[i].clone().set_requires_grad(true));
        b.push_back(b0[i].defined() ? b0[i].clone().set_requires_grad(true) : Tensor());
      }
      return x0.clone().set_requires_grad(true);
    };
    std::vector<Tensor> wf, bf, ws, bs;
    Tensor xf = leaves(wf, bf), xs = leaves(ws, bs);
    const std::vector<Tensor> fused = linears(xf, wf, bf);
    std::vector<Tensor> separate;
    for (size_t i = 0; i < outs.size(); ++i) separate.push_back(linear(xs, ws[i], bs[i]));
    Tensor lf = zeros({}, f32), ls = zeros({}, f32);
    for (size_t i = 0; i < outs.size(); ++i) {
      EXPECT_TRUE(all_close(fused[i], separate[i], 0, 0)) << "output " << i;
      if (!use_all && i == 1) continue;
      const Tensor r = random_tensor(fused[i].sizes(), s + 20 + i).to(DType::f32);
      lf = add(lf, mul(fused[i], r).sum());
      ls = add(ls, mul(separate[i], r).sum());
    }
    lf.backward();
    ls.backward();
    for (size_t i = 0; i < outs.size(); ++i) {
      if (!use_all && i == 1) {  // unused: zeros through the one node, as a split's would be
        EXPECT_FALSE(ws[i].grad().defined());
        EXPECT_EQ(max(abs(wf[i].grad())).item(), 0.0);
        continue;
      }
      EXPECT_TRUE(all_close(wf[i].grad(), ws[i].grad(), 0, 0)) << "weight " << i;
      if (bf[i].defined()) {
        EXPECT_TRUE(all_close(bf[i].grad(), bs[i].grad(), 0, 0)) << "bias " << i;
      }
    }
    EXPECT_TRUE(all_close(xf.grad(), xs.grad(), 1e-5, 1e-5));
    EXPECT_GT(max(abs(xf.grad())).item(), 0.1);
  }
}

TEST(Linears, ClearTypedErrors) {
  GRADUS_EXPECT_ERROR(linears(zeros({8, 4}), {}), ValueError, "linears", "no weights");
  GRADUS_EXPECT_ERROR(linears(zeros({8, 4}), {zeros({3, 4}), zeros({2, 4})}, {zeros({3})}),
                      ValueError, "linears", "1 biases for 2 weights");
  GRADUS_EXPECT_ERROR(linears(zeros({8, 4}), {zeros({3, 4}), zeros({2, 5})}), ShapeError, "linears",
                      "[2, 5]", "4 vs 5");
  GRADUS_EXPECT_ERROR(linears(zeros({8, 4}), {zeros({3, 4})}, {zeros({2})}), ShapeError, "linears",
                      "bias", "[3]");
}

TEST(LinearErrors, ClearTypedErrors) {
  GRADUS_EXPECT_ERROR(linear(zeros({8, 784}), zeros({10, 128})), ShapeError, "linear", "[8, 784]",
                      "[10, 128]", "784 vs 128");
  GRADUS_EXPECT_ERROR(linear(zeros({8, 4}), zeros({4})), ShapeError, "linear", "2-D");
  GRADUS_EXPECT_ERROR(linear(scalar_tensor(1.0), zeros({2, 1})), ShapeError, "linear", "0-d");
  GRADUS_EXPECT_ERROR(linear(zeros({8, 4}), zeros({3, 4}), zeros({4})), ShapeError, "linear",
                      "bias", "[3]");
  GRADUS_EXPECT_ERROR(linear(zeros({8, 4}, {.dtype = DType::f64}), zeros({3, 4})), DTypeError,
                      "linear");
  GRADUS_EXPECT_ERROR(
      linear(zeros({8, 4}, {.dtype = DType::i64}), zeros({3, 4}, {.dtype = DType::i64})),
      DTypeError, "linear");
}

}  // namespace
}  // namespace gradus
