#include "gradus/core/storage.h"

#include "gradus/core/error.h"

namespace gradus {
namespace {

// CPU slot null = the caching host allocator (src/core/host_allocator.cpp).
Allocator* g_allocators[2] = {nullptr, nullptr};

}  // namespace

void register_allocator(DeviceType type, Allocator* allocator) {
  g_allocators[static_cast<int>(type)] = allocator;
}

Allocator* allocator_for(DeviceType type) {
  Allocator* a = g_allocators[static_cast<int>(type)];
  if (a == nullptr && type == DeviceType::CPU) return default_host_allocator();
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
