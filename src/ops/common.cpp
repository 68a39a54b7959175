#include "ops/common.h"

#include <algorithm>

namespace gradus::ops {

void check_defined(const char* op, std::initializer_list<const Tensor*> tensors) {
  int i = 0;
  for (const Tensor* t : tensors) {
    GRADUS_CHECK(t->defined(), ValueError, op, ": argument ", i, " is an undefined tensor");
    ++i;
  }
}

void check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (first == nullptr) {
      first = t;
      continue;
    }
    GRADUS_CHECK(t->device() == first->device(), DeviceError, op,
                 ": expected all tensors on the same device, got ", first->device().str(), " and ",
                 t->device().str(), " (move them with .to(device))");
  }
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  GRADUS_CHECK(is_floating(t.dtype()), DTypeError, op, ": expected a floating-point ", what,
               ", got ", dtype_name(t.dtype()));
}

void check_dim(const char* op, const Tensor& t, std::initializer_list<int64_t> ranks,
               const char* what) {
  for (int64_t r : ranks) {
    if (t.dim() == r) return;
  }
  std::string allowed;
  for (int64_t r : ranks) allowed += (allowed.empty() ? "" : " or ") + std::to_string(r) + "-D";
  throw ShapeError(detail::str_cat(op, ": expected ", what, " to be ", allowed, ", got shape ",
                                   shape_str(t.sizes())));
}

Tensor broadcast_raw(const Tensor& t, const Shape& shape) {
  if (t.sizes() == shape) return t.detach();
  const int64_t n = static_cast<int64_t>(shape.size());
  const int64_t lead = n - t.dim();
  Shape strides(shape.size(), 0);
  for (int64_t i = 0; i < t.dim(); ++i) {
    strides[lead + i] = t.size(i) == 1 && shape[lead + i] != 1 ? 0 : t.stride(i);
  }
  return t.as_strided_raw(shape, strides, t.offset());
}

Tensor cast_raw(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = new_empty(t.sizes(), dtype, t.device());
  backend_of(t).copy(t, out);
  return out;
}

Tensor new_heads_like(const Tensor& like, int64_t width, DType dtype) {
  const int64_t b = like.size(0), h = like.size(1), t = like.size(2);
  const bool time_major = h > 1 && like.stride(2) > like.stride(1);
  if (!time_major) return new_empty({b, h, t, width}, dtype, like.device());
  return new_empty({b, t, h, width}, dtype, like.device())
      .as_strided_raw({b, h, t, width}, {t * h * width, width, h * width, 1}, 0);
}

Tensor contiguous_raw(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = new_empty(t.sizes(), t.dtype(), t.device());
  backend_of(t).copy(t, out);
  return out;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.sizes() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < grad.dim(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && grad.size(i) != 1)) dims.push_back(i);
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

Tensor reduce_grad(const Tensor& grad, const InputMeta& input) {
  Tensor g = sum_to(grad, input.shape);
  return g.dtype() == input.dtype ? g : g.to(input.dtype);
}

std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim,
                                    const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t i = 0; i < ndim; ++i) out.push_back(i);
    return out;
  }
  for (int64_t d : dims) out.push_back(normalize_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  GRADUS_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), ValueError, op,
               ": a dimension appears more than once in the reduction axes");
  return out;
}

}  // namespace gradus::ops
