#include "gradus/core/storage.h"

#include "core/cuda_module.h"
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
  if (a == nullptr && cuda::detail::module() != nullptr) {  // loading it registered the allocator
    a = g_allocators[static_cast<int>(type)];
  }
  GRADUS_CHECK(a != nullptr, DeviceError,
               "no allocator for device type cuda: ", cuda::backend_status());
  return a;
}

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  Allocator* a = allocator_for(device.type());
  streams_.allocated_on = a->allocation_stream(device.index());
  data_ = a->allocate(nbytes, device.index());
}

StorageImpl::StorageImpl(void* external, size_t nbytes, Device device)
    : data_(external), nbytes_(nbytes), device_(device), owned_(false) {}

StorageImpl::~StorageImpl() {
  free_memory();
}

void StorageImpl::free_memory() {
  if (!owned_ || data_ == nullptr) return;
  Allocator* a = allocator_for(device_.type());
  if (streams_.allocated_on == nullptr) {
    a->deallocate(data_, nbytes_, device_.index());
  } else {
    // Freed in the order of the stream it was allocated on (whichever stream is current for the
    // thread that drops the last reference), after every other stream that used it.
    a->deallocate_after(data_, nbytes_, device_.index(), streams_);
  }
  data_ = nullptr;
}

void StorageImpl::release() {
  GRADUS_CHECK(owned_, ValueError, "StorageImpl::release: the memory belongs to someone else");
  free_memory();
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.others.clear();
}

void StorageImpl::reacquire() {
  if (is_resident()) return;
  Allocator* a = allocator_for(device_.type());
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    streams_.allocated_on = a->allocation_stream(device_.index());
  }
  data_ = a->allocate(nbytes_, device_.index());
}

void detail::throw_released_storage() {
  throw ValueError(
      "tensor: its storage is released (a fully sharded parameter read while not gathered: "
      "read it inside Strategy::full_parameters() or the module's forward)");
}

void StorageImpl::record_stream(void* stream) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  if (stream == nullptr || stream == streams_.allocated_on) return;
  for (void* s : streams_.others) {
    if (s == stream) return;
  }
  streams_.others.push_back(stream);
}

StreamUses StorageImpl::stream_uses() const {
  std::lock_guard<std::mutex> lock(streams_mu_);
  return streams_;
}

}  // namespace gradus
