// Flat buffers over a list of parameters: DDP's gradient buckets, the parameter server's messages
// and ZeRO's shards all pack tensors of one dtype and device back to back in one contiguous
// tensor and address each parameter as a view of it. Internal to gradus::dist.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradus/core/tensor.h"

namespace gradus::dist::detail {

// Parameters (indices into the caller's list) packed into one flat tensor.
struct FlatLayout {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  std::vector<size_t> params;    // indices, in packing order
  std::vector<int64_t> offsets;  // element offset of each, in the flat tensor
  int64_t numel = 0;             // used elements
  int64_t padded_numel = 0;      // allocated (numel rounded up to a multiple of `align`)
};

// Splits params into layouts of one dtype and device each, in the order given (callers pass the
// reverse registration order for DDP). cap_bytes > 0 starts a new layout when adding a parameter
// would exceed it (first_cap_bytes for the first layout of each dtype/device); every layout holds
// at least one parameter. align pads each layout's size (ZeRO: the world size).
std::vector<FlatLayout> plan_flat_layouts(const std::vector<Tensor>& params,
                                          const std::vector<size_t>& order, int64_t first_cap_bytes,
                                          int64_t cap_bytes, int64_t align);

// A contiguous view of `shape` at element `offset` of the contiguous tensor `flat`.
Tensor flat_view(const Tensor& flat, int64_t offset, const Shape& shape);

// The padded flat tensor of a layout.
Tensor allocate_flat(const FlatLayout& layout);

}  // namespace gradus::dist::detail
