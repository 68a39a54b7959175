// Every collective against a reference each rank computes itself in float64 from the inputs of
// all ranks (rebuilt from their seeds): every float dtype, sizes 0, 1 and uneven ones.
#include <algorithm>
#include <cmath>

#include "dist/dist_test_util.h"

namespace gradus::testing {
namespace {

using dist::ReduceOp;

const std::vector<DType> kFloatTypes = {DType::f32, DType::f64, DType::f16, DType::bf16};

double tolerance(DType d, int ranks) {
  switch (d) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 1e-6 * ranks;
    case DType::f16:
      return 1e-3 * ranks;
    default:
      return 1.6e-2 * ranks;
  }
}

// Rank r's input: values rounded to dtype, returned as f64 for the reference.
Tensor input_of(uint64_t seed, int r, int64_t n, DType dtype) {
  return random_tensor({n}, rank_seed(seed, r), -2.0, 2.0, DType::f64).to(dtype);
}

Tensor reference(uint64_t seed, int ranks, int64_t n, DType dtype, ReduceOp op) {
  Tensor acc = input_of(seed, 0, n, dtype).to(DType::f64);
  for (int r = 1; r < ranks; ++r) {
    Tensor x = input_of(seed, r, n, dtype).to(DType::f64);
    if (op == ReduceOp::max) {
      acc = maximum(acc, x);
    } else if (op == ReduceOp::min) {
      acc = minimum(acc, x);
    } else {
      acc = add(acc, x);
    }
  }
  if (op == ReduceOp::avg) acc = mul(acc, 1.0 / ranks);
  return acc;
}

class Collectives : public ::testing::Test {
 protected:
  std::shared_ptr<dist::ProcessGroup> pg = dist::default_group();
  int rank = pg->rank();
  int size = pg->size();
};

TEST_F(Collectives, AllReduceEveryOpDtypeAndSize) {
  const uint64_t seed = shared_seed();
  for (DType dtype : kFloatTypes) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
      for (int64_t n : {0, 1, 7, 1001, 65537}) {
        Tensor t = input_of(seed, rank, n, dtype);
        pg->all_reduce(t, op, "x")->wait();
        const Tensor expected = reference(seed, size, n, dtype, op);
        EXPECT_TRUE(
            all_close(t.to(DType::f64), expected, tolerance(dtype, size), tolerance(dtype, size)))
            << dtype_name(dtype) << " " << dist::reduce_op_name(op) << " n=" << n
            << " seed=" << seed;
      }
    }
  }
}

TEST_F(Collectives, AllReduceIntegers) {
  for (DType dtype : {DType::i32, DType::i64}) {
    Tensor t = full({5}, rank + 1, {.dtype = dtype});
    pg->all_reduce(t, ReduceOp::sum)->wait();
    EXPECT_EQ(t.to_vector<int64_t>(), std::vector<int64_t>(5, size * (size + 1) / 2));
    Tensor m = full({3}, rank * 10, {.dtype = dtype});
    pg->all_reduce(m, ReduceOp::max)->wait();
    EXPECT_EQ(m.to_vector<int64_t>(), std::vector<int64_t>(3, (size - 1) * 10));
  }
  Tensor i = full({2}, 1, {.dtype = DType::i32});
  EXPECT_THROW(pg->all_reduce(i, ReduceOp::avg), DTypeError);
}

TEST_F(Collectives, BroadcastFromEveryRoot) {
  const uint64_t seed = shared_seed();
  for (DType dtype : kFloatTypes) {
    for (int root = 0; root < size; ++root) {
      for (int64_t n : {0, 3, 4097}) {
        Tensor t = input_of(seed, rank, n, dtype);
        pg->broadcast(t, root, "b")->wait();
        EXPECT_TRUE(
            all_close(t.to(DType::f64), input_of(seed, root, n, dtype).to(DType::f64), 0, 0))
            << dtype_name(dtype) << " root " << root;
      }
    }
  }
}

TEST_F(Collectives, ReduceOnlyChangesTheRoot) {
  const uint64_t seed = shared_seed();
  for (DType dtype : kFloatTypes) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      const int root = size - 1;
      Tensor t = input_of(seed, rank, 333, dtype);
      pg->reduce(t, root, op)->wait();
      const Tensor expected =
          rank == root ? reference(seed, size, 333, dtype, op) : input_of(seed, rank, 333, dtype);
      EXPECT_TRUE(all_close(t.to(DType::f64), expected.to(DType::f64), tolerance(dtype, size),
                            tolerance(dtype, size)))
          << dtype_name(dtype) << " " << dist::reduce_op_name(op);
    }
  }
}

TEST_F(Collectives, ReduceScatterGivesEachRankItsChunk) {
  const uint64_t seed = shared_seed();
  for (DType dtype : kFloatTypes) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min}) {
      for (int64_t chunk : {0, 1, 13, 2049}) {
        const int64_t n = chunk * size;
        Tensor in = input_of(seed, rank, n, dtype);
        Tensor out = full({chunk}, 12345.0, {.dtype = dtype});  // poisoned
        pg->reduce_scatter(out, in, op)->wait();
        const Tensor full_ref = reference(seed, size, n, dtype, op);
        EXPECT_TRUE(all_close(out.to(DType::f64),
                              full_ref.slice(0, rank * chunk, (rank + 1) * chunk),
                              tolerance(dtype, size), tolerance(dtype, size)))
            << dtype_name(dtype) << " " << dist::reduce_op_name(op) << " chunk " << chunk;
      }
    }
  }
  Tensor bad_in = zeros({static_cast<int64_t>(size) * 3 + 1});
  Tensor bad_out = zeros({3});
  EXPECT_THROW(pg->reduce_scatter(bad_out, bad_in), ShapeError);
}

TEST_F(Collectives, AllGatherInRankOrderAndInPlace) {
  const uint64_t seed = shared_seed();
  for (DType dtype : kFloatTypes) {
    for (int64_t chunk : {0, 1, 9, 3001}) {
      Tensor in = input_of(seed, rank, chunk, dtype);
      Tensor out = full({chunk * size}, -777.0, {.dtype = dtype});
      pg->all_gather(out, in)->wait();
      std::vector<Tensor> parts;
      for (int r = 0; r < size; ++r) parts.push_back(input_of(seed, r, chunk, dtype));
      const Tensor expected = cat(parts, 0).to(DType::f64);
      EXPECT_TRUE(all_close(out.to(DType::f64), expected, 0, 0)) << dtype_name(dtype);

      // In place: the input is the view of this rank's chunk of the output.
      Tensor flat = full({chunk * size}, -777.0, {.dtype = dtype});
      Tensor own = flat.slice(0, rank * chunk, (rank + 1) * chunk);
      own.copy_(in);
      pg->all_gather(flat, own)->wait();
      EXPECT_TRUE(all_close(flat.to(DType::f64), expected, 0, 0)) << dtype_name(dtype);
    }
  }
}

TEST_F(Collectives, SendRecvRing) {
  if (size < 2) GTEST_SKIP() << "needs 2 ranks";
  const uint64_t seed = shared_seed();
  for (DType dtype : kFloatTypes) {
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    Tensor out = input_of(seed, rank, 517, dtype);
    Tensor in = full({517}, 99.0, {.dtype = dtype});
    dist::WorkPtr r = pg->recv(in, prev, 3, "ring");
    dist::WorkPtr s = pg->send(out, next, 3, "ring");
    dist::wait_all({r, s});
    EXPECT_TRUE(
        all_close(in.to(DType::f64), input_of(seed, prev, 517, dtype).to(DType::f64), 0, 0));
  }
}

TEST_F(Collectives, AsynchronousWorkCompletesInOrder) {
  // Many collectives in flight at once, waited for in reverse order.
  std::vector<Tensor> ts;
  std::vector<dist::WorkPtr> works;
  for (int i = 0; i < 16; ++i) {
    ts.push_back(full({1000 + i}, rank + i, {.dtype = DType::f64}));
    works.push_back(pg->all_reduce(ts.back(), ReduceOp::sum));
  }
  for (int i = 15; i >= 0; --i) works[static_cast<size_t>(i)]->wait();
  for (int i = 0; i < 16; ++i) {
    EXPECT_TRUE(works[static_cast<size_t>(i)]->is_completed());
    const double expected = size * (size - 1) / 2.0 + size * i;
    EXPECT_EQ(ts[static_cast<size_t>(i)].to_vector<double>()[0], expected);
  }
  pg->barrier()->wait();
}

TEST_F(Collectives, BadArgumentsGiveClearErrors) {
  EXPECT_THROW(pg->broadcast(zeros({2}), size), ValueError);    // root outside the world
  EXPECT_THROW(pg->all_reduce(zeros({4, 4}).t()), ValueError);  // not contiguous
  EXPECT_THROW(pg->all_reduce(Tensor()), ValueError);
  EXPECT_THROW(pg->send(zeros({2}), rank), ValueError);  // to itself
  try {
    pg->all_reduce(zeros({4, 4}).t(), ReduceOp::sum, "weights");
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'weights'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("contiguous"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradus::testing
