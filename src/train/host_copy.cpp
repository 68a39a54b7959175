#include "train/host_copy.h"

#include <memory>

#include "gradus/autograd/raw_copy.h"
#include "gradus/core/cuda.h"
#include "gradus/ops.h"

namespace gradus::train {

std::vector<Tensor> host_copies(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out(tensors.size());
  std::vector<Tensor> device_sources(tensors.size());
  size_t pinned_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined()) continue;
    if (!t.device().is_cuda()) {
      out[i] = t.detach().clone();
      continue;
    }
    device_sources[i] = t.detach().contiguous();
    pinned_bytes += (static_cast<size_t>(t.numel()) * t.element_size() + 63) / 64 * 64;
  }
  if (pinned_bytes == 0) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (device_sources[i].defined()) out[i] = device_sources[i].to(Device::cpu());
    }
    return out;
  }
  std::shared_ptr<void> block;
  try {
    block = std::shared_ptr<void>(cuda::alloc_pinned(pinned_bytes), cuda::free_pinned);
  } catch (const Error&) {  // (pinning refused: pageable copies)
  }
  size_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& src = device_sources[i];
    if (!src.defined()) continue;
    if (!block) {
      out[i] = src.to(Device::cpu());
      continue;
    }
    const size_t nbytes = static_cast<size_t>(src.numel()) * src.element_size();
    void* p = static_cast<char*>(block.get()) + offset;
    offset += (nbytes + 63) / 64 * 64;
    // The storage does not own p: its deleter keeps the block alive until its last copy goes.
    Storage storage(new StorageImpl(p, nbytes, Device::cpu()),
                    [block](StorageImpl* s) { delete s; });
    out[i] = Tensor(std::make_shared<TensorImpl>(storage, src.sizes(),
                                                 contiguous_strides(src.sizes()), 0, src.dtype()));
    copy_to_host_memory(src, p);
  }
  return out;
}

}  // namespace gradus::train
