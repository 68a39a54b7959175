// The CUDA runtime layer: device queries, memory statistics of the pool allocator, the
// out-of-memory error, streams / events, pinned memory and host transfers.
#include <cstring>

#include "gpu/gpu_test_util.h"

namespace gradus {
namespace {

using namespace gpu_test;

TEST(CudaRuntime, DeviceCountNeverThrows) {
  EXPECT_NO_THROW(cuda_device_count());
  EXPECT_EQ(cuda::device_count(), cuda_device_count());
  EXPECT_EQ(Device::best().is_cuda(), cuda_device_count() > 0);
}

TEST(CudaRuntime, CudaTensorWithoutDeviceIsATypedError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(zeros({4}, {.device = Device::cuda(0)}), Error);
}

TEST(CudaRuntime, DeviceProperties) {
  GRADUS_REQUIRE_GPU();
  const cuda::DeviceProperties p = cuda::device_properties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GE(p.major, 5);
  EXPECT_GT(p.multiprocessors, 0);
  EXPECT_GT(p.total_memory, size_t{1} << 30);
  EXPECT_GT(p.l2_cache_bytes, 0u);
  EXPECT_EQ(p.warp_size, 32);
  EXPECT_GT(p.memory_bus_width, 0);
  // Peak bandwidth from clock and bus width: between 100 GB/s and 20 TB/s for any real GPU.
  if (p.memory_clock_khz > 0) {
    EXPECT_GT(p.memory_bandwidth_gbps, 100.0);
    EXPECT_LT(p.memory_bandwidth_gbps, 20000.0);
  }
  EXPECT_EQ(cuda::current_device(), 0);
  EXPECT_THROW(cuda::device_properties(cuda::device_count()), DeviceError);
}

TEST(CudaRuntime, MemoryStatsTrackAllocations) {
  GRADUS_REQUIRE_GPU();
  cuda::synchronize();
  const cuda::MemoryStats before = cuda::memory_stats(0);
  const size_t bytes = size_t{256} << 20;
  {
    Tensor t = empty({static_cast<int64_t>(bytes / 4)}, {DType::f32, cuda0()});
    const cuda::MemoryStats during = cuda::memory_stats(0);
    EXPECT_GE(during.allocated, before.allocated + bytes);
    EXPECT_GE(during.peak_allocated, during.allocated);
    EXPECT_GE(during.reserved, during.allocated);
    EXPECT_GT(during.total, during.free);
    EXPECT_GT(during.num_allocs, before.num_allocs);
  }
  cuda::synchronize();
  const cuda::MemoryStats after = cuda::memory_stats(0);
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_GE(after.peak_allocated, before.allocated + bytes);
  // The pool keeps the freed block (release threshold raised).
  EXPECT_GE(after.reserved, bytes);
  cuda::reset_peak_memory_stats(0);
  EXPECT_EQ(cuda::memory_stats(0).peak_allocated, cuda::memory_stats(0).allocated);
  cuda::empty_cache(0);
  EXPECT_LE(cuda::memory_stats(0).reserved, after.reserved);
}

TEST(CudaRuntime, OutOfMemoryErrorExplains) {
  GRADUS_REQUIRE_GPU();
  const int64_t huge = int64_t{1} << 45;  // 128 TiB of float32
  try {
    Tensor t = empty({huge}, {DType::f32, cuda0()});
    FAIL() << "allocating 128 TiB did not fail";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    for (const char* word : {"out of memory", "cuda:0", "free", "total", "allocated", "reserved",
                             "--batch-size", "--amp", "--grad-checkpoint"}) {
      EXPECT_NE(msg.find(word), std::string::npos) << "missing '" << word << "' in: " << msg;
    }
  }
  EXPECT_GE(cuda::memory_stats(0).num_ooms, 1u);
  // The device stays usable.
  Tensor ok = full({1000}, 3.0, {DType::f32, cuda0()});
  EXPECT_DOUBLE_EQ(sum(ok).item(), 3000.0);
}

TEST(CudaRuntime, HostRoundTripAndPinnedMemory) {
  GRADUS_REQUIRE_GPU();
  const Tensor h = rnd({1 << 20}, DType::f32);
  EXPECT_TRUE(identical(h.to(cuda0()), h));

  const size_t n = 1 << 16;
  float* pinned = static_cast<float*>(cuda::alloc_pinned(n * sizeof(float)));
  ASSERT_NE(pinned, nullptr);
  EXPECT_TRUE(cuda::is_pinned(pinned));
  EXPECT_FALSE(cuda::is_pinned(h.raw_data()));
  for (size_t i = 0; i < n; ++i) pinned[i] = static_cast<float>(i) * 0.5f;
  Tensor d = empty({static_cast<int64_t>(n)}, {DType::f32, cuda0()});
  // d was allocated in the compute stream's order: the copy stream waits for that first.
  cuda::Event ready, done;
  ready.record();
  ready.wait(cuda::copy_stream());
  cuda::copy_from_host_async(pinned, d, cuda::copy_stream());
  done.record(cuda::copy_stream());
  done.wait();  // the compute stream waits for the copy
  const std::vector<float> back = d.to_vector<float>();
  for (size_t i = 0; i < n; i += 997) EXPECT_EQ(back[i], static_cast<float>(i) * 0.5f);
  cuda::free_pinned(pinned);
}

TEST(CudaRuntime, EventsTimeWork) {
  GRADUS_REQUIRE_GPU();
  cuda::Event start, stop;
  Tensor a = rnd({1024, 1024}, DType::f32).to(cuda0());
  start.record();
  Tensor b = matmul(a, a);
  stop.record();
  stop.synchronize();
  EXPECT_TRUE(stop.query());
  EXPECT_GE(start.elapsed_ms(stop), 0.0f);
}

TEST(CudaRuntime, StreamGuardSwitchesTheComputeStream) {
  GRADUS_REQUIRE_GPU();
  cuda::StreamHandle main = cuda::current_stream();
  {
    cuda::StreamGuard guard(cuda::copy_stream());
    EXPECT_EQ(cuda::current_stream(), cuda::copy_stream());
    Tensor t = full({100}, 2.0, {DType::f32, cuda0()});
    EXPECT_DOUBLE_EQ(sum(t).item(), 200.0);
  }
  EXPECT_EQ(cuda::current_stream(), main);
}

TEST(CudaRuntime, Tf32Switch) {
  GRADUS_REQUIRE_GPU();
  const bool old = cuda::allow_tf32();
  cuda::set_allow_tf32(true);
  EXPECT_TRUE(cuda::allow_tf32());
  cuda::set_allow_tf32(false);
  EXPECT_FALSE(cuda::allow_tf32());
  cuda::set_allow_tf32(old);
}

// cuda:0 -> cuda:1 copies peer to peer (no host round trip: no host wait either), ordered after
// the source's producers; values survive the source being freed and its block reused at once.
TEST(CudaRuntime, CopiesBetweenDevicesArePeerToPeer) {
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  const Tensor host = rnd({3, 1000, 37}, DType::f32);
  Tensor on1;
  {
    const Tensor on0 = mul(host.to(Device::cuda(0)), 2.0);  // produced by a kernel on cuda:0
    const uint64_t before = cuda::host_syncs();
    on1 = on0.to(Device::cuda(1));
    EXPECT_EQ(cuda::host_syncs(), before) << "the copy went through the host";
    EXPECT_EQ(on1.device(), Device::cuda(1));
  }
  // The source's block is free now: fill whatever reuses it before reading the copy.
  const Tensor reuse = full({3, 1000, 37}, 7.0, {DType::f32, Device::cuda(0)});
  (void)reuse;
  EXPECT_TRUE(identical(on1.to(Device::cpu()), mul(host, 2.0)));
  // And back, with a dtype change on the way.
  EXPECT_TRUE(identical(on1.to(Device::cuda(0), DType::f64).to(Device::cpu()),
                        mul(host, 2.0).to(DType::f64)));
}

}  // namespace
}  // namespace gradus
