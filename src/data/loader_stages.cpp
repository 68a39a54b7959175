// The DataLoader's stages around get_batch (see loader_stages.h): transforms, pinned host
// buffers and the asynchronous host-to-device copy of a CUDA target.
//
// The CUDA code here compiles in every build but only runs for a CUDA target; it has not yet run
// on a GPU (docs/performance.md, "Input pipeline").
#include "data/loader_stages.h"

#include <omp.h>

#include <cstdio>
#include <cstring>

#include "gradus/autograd.h"
#include "gradus/core/error.h"

namespace gradus::data::detail {

// ------------------------------------------------------------------------------ PinnedPool
PinnedPool::~PinnedPool() {
  for (auto& [size, p] : free_) cuda::free_pinned(p);
}

bool PinnedPool::pinning_failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void* PinnedPool::acquire(size_t nbytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return nullptr;
    auto it = free_.find(nbytes);
    if (it != free_.end()) {
      void* p = it->second;
      free_.erase(it);
      return p;
    }
  }
  // cudaHostAlloc takes milliseconds: outside the lock, so other workers keep going.
  try {
    return cuda::alloc_pinned(nbytes);
  } catch (const Error& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_) {
      std::fprintf(stderr,
                   "gradus: warning: DataLoader: cannot pin host memory (%s); batches are copied "
                   "from pageable memory\n",
                   e.what());
    }
    failed_ = true;
    return nullptr;
  }
}

void PinnedPool::release(void* p, size_t nbytes) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.emplace(nbytes, p);
}

Tensor PinnedPool::pinned_copy(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu()) return t;
  const Tensor src = t.contiguous();
  const size_t nbytes = static_cast<size_t>(src.numel()) * src.element_size();
  if (nbytes == 0) return src;
  void* p = acquire(nbytes);
  if (p == nullptr) return src;
  std::memcpy(p, src.raw_data(), nbytes);
  // The storage does not own p: its deleter hands p back to this pool (kept alive by the
  // deleter), so a batch buffer is reused as soon as the last view of the batch is gone.
  Storage storage(new StorageImpl(p, nbytes, Device::cpu()),
                  [pool = shared_from_this(), p, nbytes](StorageImpl* s) {
                    delete s;
                    pool->release(p, nbytes);
                  });
  return Tensor(std::make_shared<TensorImpl>(storage, src.sizes(), contiguous_strides(src.sizes()),
                                             0, src.dtype()));
}

// ------------------------------------------------------------------------------ stages
void configure_worker_thread() {
  omp_set_num_threads(1);
}

PhiloxState batch_stream(const DataLoaderOptions& o, int64_t epoch, int64_t batch) {
  const int64_t first = o.world_size > 1 ? o.rank * (o.batch_size / o.world_size) : 0;
  return transform_stream(o.seed, epoch, batch, first);
}

void transform_batch(Example& batch, const DataLoaderOptions& o, const PhiloxState& stream) {
  if (!o.transform) return;
  Generator gen;
  gen.set_state(stream);
  o.transform(batch, gen);
}

Example prepare_batch(Example batch, const DataLoaderOptions& o, PinnedPool* pinned,
                      const PhiloxState& stream) {
  if (o.device.is_cuda()) {
    // The loop's thread copies it (DeviceFeed) and transforms it on the device.
    if (pinned != nullptr) {
      batch.input = pinned->pinned_copy(batch.input);
      batch.target = pinned->pinned_copy(batch.target);
    }
    return batch;
  }
  if (batch.input.defined() && batch.input.device() != o.device) {
    batch.input = batch.input.to(o.device);
  }
  if (batch.target.defined() && batch.target.device() != o.device) {
    batch.target = batch.target.to(o.device);
  }
  transform_batch(batch, o, stream);
  return batch;
}

// ------------------------------------------------------------------------------ DeviceFeed
DeviceFeed::~DeviceFeed() {
  // A copy may still be reading a host buffer that goes back to the pool (and to a worker) once
  // the Copy is destroyed: wait for every copy first.
  for (std::deque<Copy>* q : {&staged_, &in_flight_}) {
    for (Copy& c : *q) {
      try {
        c.done->synchronize();
      } catch (...) {
        // A failed device: nothing can be done here, and the error surfaces at the next sync.
      }
    }
  }
}

bool DeviceFeed::staged(int64_t batch) const {
  for (const Copy& c : staged_) {
    if (c.batch == batch) return true;
  }
  return false;
}

void DeviceFeed::stage(int64_t batch, Example host) {
  reclaim();
  const int dev = device_.index();
  const cuda::StreamHandle copy = cuda::copy_stream(dev);
  Copy c;
  c.batch = batch;
  // Fresh device tensors come from the pool in compute-stream order; the copy stream may write
  // them only after that point.
  auto device_tensor = [&](const Tensor& h) {
    if (!h.defined() || h.device() == device_) return h;
    return empty(h.sizes(), {h.dtype(), device_});
  };
  c.device.input = device_tensor(host.input);
  c.device.target = device_tensor(host.target);
  cuda::Event allocated(dev);
  allocated.record(cuda::current_stream(dev));
  allocated.wait(copy);
  const std::pair<Tensor*, Tensor*> parts[] = {{&host.input, &c.device.input},
                                               {&host.target, &c.device.target}};
  for (auto [h, d] : parts) {
    if (h->defined() && !h->device().is_cuda()) {
      *h = h->contiguous();
      cuda::copy_from_host_async(h->raw_data(), *d, copy);
      // A batch dropped before take() (the loop left early) must not return its memory to the
      // pool while the copy stream still writes it.
      cuda::record_stream(*d, copy);
    }
  }
  c.done = std::make_unique<cuda::Event>(dev);
  c.done->record(copy);
  c.host = std::move(host);
  staged_.push_back(std::move(c));
}

Example DeviceFeed::take(int64_t batch) {
  GRADUS_CHECK(!staged_.empty() && staged_.front().batch == batch, ValueError,
               "DataLoader: internal error: batch ", batch, " was not staged for the device");
  Copy c = std::move(staged_.front());
  staged_.pop_front();
  // The compute stream, not the host, waits for the copy.
  c.done->wait(cuda::current_stream(device_.index()));
  Example out = std::move(c.device);
  c.device = {};
  in_flight_.push_back(std::move(c));
  reclaim();
  return out;
}

void DeviceFeed::reclaim() {
  while (!in_flight_.empty() && in_flight_.front().done->query()) in_flight_.pop_front();
}

}  // namespace gradus::data::detail
