// Helpers shared by the op families in src/ops. Internal.
#pragma once

#include <initializer_list>

#include "autograd/node.h"
#include "backend/backend.h"
#include "gradus/autograd.h"
#include "gradus/core/profiling.h"
#include "gradus/ops.h"

namespace gradus::ops {

using autograd::NeedsGrad;
using autograd::record;
using autograd::record_multi;
using autograd::SavedTensor;
using autograd::TensorList;
using backend::Backend;

inline Backend& backend_of(const Tensor& t) {
  return backend::backend_for(t.device().type());
}

// Throws ValueError if any tensor is undefined.
void check_defined(const char* op, std::initializer_list<const Tensor*> tensors);
// Throws DeviceError naming the op and both devices if the tensors are on different devices.
void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);
// Throws DTypeError unless t has a floating dtype.
void check_floating(const char* op, const Tensor& t, const char* what = "input");
// Throws ShapeError unless t.dim() is one of the allowed ranks.
void check_dim(const char* op, const Tensor& t, std::initializer_list<int64_t> ranks,
               const char* what = "input");

// Fresh uninitialised output on the given device.
inline Tensor new_empty(const Shape& shape, DType dtype, Device device) {
  return empty(shape, {dtype, device, false});
}

// A new [B, H, T, width] tensor for the heads of `like` (4-D [B, H, T, D]): [B, T, H, width] in
// memory when like's rows are interleaved over heads (the heads of a [B, T, H * D] projection,
// transposed), so that transposing the result back and merging its heads is a view; contiguous
// [B, H, T, width] otherwise.
Tensor new_heads_like(const Tensor& like, int64_t width, DType dtype);

// A history-free view of t broadcast to `shape` (stride 0 on expanded dims). Kernel input helper.
Tensor broadcast_raw(const Tensor& t, const Shape& shape);
// t converted to `dtype` without history (returns t itself when already that dtype).
Tensor cast_raw(const Tensor& t, DType dtype);
// A contiguous, history-free version of t (t itself when already contiguous).
Tensor contiguous_raw(const Tensor& t);

// Reduces a broadcast gradient back to `shape` (summing expanded dims) and casts to `dtype`.
Tensor sum_to(const Tensor& grad, const Shape& shape);
struct InputMeta {
  Shape shape;
  DType dtype;
  explicit InputMeta(const Tensor& t) : shape(t.sizes()), dtype(t.dtype()) {}
};
Tensor reduce_grad(const Tensor& grad, const InputMeta& input);

// Normalises a list of (possibly negative) axes: sorted, unique; empty = all axes.
std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* op);

}  // namespace gradus::ops
