#include "gradus/core/storage.h"

#include <cstdlib>
#include <new>

#include "gradus/core/error.h"

namespace gradus {
namespace {

// 64-byte aligned host memory, so vector loops and BLAS see aligned rows.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes, int) override {
    if (nbytes == 0) return nullptr;
    const size_t rounded = (nbytes + 63) & ~size_t{63};
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) {
      throw OutOfMemoryError(detail::str_cat("cpu: failed to allocate ", nbytes,
                                             " bytes of host memory (hint: use a smaller batch)"));
    }
    return p;
  }
  void deallocate(void* ptr, size_t, int) override { std::free(ptr); }
};

CpuAllocator g_cpu_allocator;
Allocator* g_allocators[2] = {&g_cpu_allocator, nullptr};

}  // namespace

void register_allocator(DeviceType type, Allocator* allocator) {
  g_allocators[static_cast<int>(type)] = allocator;
}

Allocator* allocator_for(DeviceType type) {
  Allocator* a = g_allocators[static_cast<int>(type)];
  GRADUS_CHECK(a != nullptr, DeviceError, "no allocator for device type ",
               type == DeviceType::CUDA ? "cuda" : "cpu",
               ": this build of gradus has no CUDA backend (configure with GRADUS_USE_CUDA=ON)");
  return a;
}

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device.type())->allocate(nbytes, device.index());
}

StorageImpl::StorageImpl(void* external, size_t nbytes, Device device)
    : data_(external), nbytes_(nbytes), device_(device), owned_(false) {}

StorageImpl::~StorageImpl() {
  if (owned_ && data_ != nullptr) {
    allocator_for(device_.type())->deallocate(data_, nbytes_, device_.index());
  }
}

}  // namespace gradus
