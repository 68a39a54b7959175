// Kernels on more than 2^31 elements (index arithmetic in 64 bits: a 32-bit index would wrap and
// write below the tensor), and a convolution whose shape is first seen inside a CUDA graph
// capture (no algorithm search may run there).
#include "gpu/gpu_test_util.h"

namespace gradus {
namespace {

using namespace gpu_test;

// u8 elements: 2^31 + 4099 of them are 2 GiB a tensor; three live at once.
TEST(CudaLarge, ElementwiseReductionAndCopyPast2To31Elements) {
  GRADUS_REQUIRE_GPU();
  const int64_t n = (int64_t{1} << 31) + 4099;
  if (cuda::memory_stats(0).free < size_t{9} << 30)
    GTEST_SKIP() << "needs 9 GiB of free GPU memory";
  const Tensor a = full({n}, 3.0, {DType::u8, cuda0()});
  Tensor b = add(a, a);  // 6 everywhere, written by a kernel indexing past 2^31
  // The last elements (past 2^31) and the first ones.
  const std::vector<uint8_t> tail = b.slice(0, n - 5000, n).to(Device::cpu()).to_vector<uint8_t>();
  for (size_t i = 0; i < tail.size(); ++i)
    ASSERT_EQ(tail[i], 6) << "element " << n - 5000 + int64_t(i);
  EXPECT_EQ(b.slice(0, 0, 3).to(Device::cpu()).to_vector<uint8_t>(),
            (std::vector<uint8_t>{6, 6, 6}));
  // A sum over all of them (accumulated in 64 bits).
  EXPECT_EQ(static_cast<int64_t>(sum(b).item()), 6 * n);
  // A strided copy (every other element) and a contiguous one, checked at their ends.
  b.slice(0, n - 3, n).fill_(9.0);
  const Tensor odd = b.slice(0, 1, n, 2).contiguous();
  ASSERT_EQ(odd.numel(), (n - 1 + 1) / 2);
  const std::vector<uint8_t> odd_tail =
      odd.slice(0, odd.numel() - 3, odd.numel()).to(Device::cpu()).to_vector<uint8_t>();
  EXPECT_EQ(odd_tail, (std::vector<uint8_t>{6, 6, 9}));  // elements n-6, n-4, n-2 (n is odd)
  Tensor c = empty({n}, {DType::u8, cuda0()});
  c.copy_(b);
  EXPECT_EQ(c.slice(0, n - 4, n).to(Device::cpu()).to_vector<uint8_t>(),
            (std::vector<uint8_t>{6, 9, 9, 9}));
}

// A convolution never run before, first called inside a capture: the algorithm comes from the
// heuristics (nothing timed in the capture), the replay gives what an eager call gives, and the
// first eager call afterwards still works (it searches then).
TEST(CudaLarge, ConvolutionShapeFirstSeenInsideACapture) {
  GRADUS_REQUIRE_GPU();
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(t));
    // An odd shape no other test uses, so the algorithm cache has not seen it.
    const Tensor x = rnd({3, 5, 37, 29}, t).to(cuda0()), w = rnd({7, 5, 3, 3}, t).to(cuda0());
    Tensor out = empty({3, 7, 37, 29}, {t, cuda0()});
    cuda::Graph graph;
    const Conv2dOptions same{.padding = {1, 1}};
    graph.capture([&] { out.copy_(conv2d(x, w, Tensor(), same)); });
    graph.replay();
    const Tensor eager = conv2d(x, w, Tensor(), same);
    const Tensor expect = conv2d(x.to(Device::cpu()).to(DType::f64),
                                 w.to(Device::cpu()).to(DType::f64), Tensor(), same);
    EXPECT_TRUE(close(out, expect, tol(t) * 8, 2.0)) << "replayed";
    EXPECT_TRUE(close(eager, expect, tol(t) * 8, 2.0)) << "eager, after the capture";
  }
}

}  // namespace
}  // namespace gradus
