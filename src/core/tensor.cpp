// The parts of Tensor that need no kernels: metadata, views by raw strides, autograd fields.
#include "gradus/core/tensor.h"

#include "gradus/core/error.h"

namespace gradus {

TensorImpl::TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype) {
  refresh();
}

void TensorImpl::refresh() {
  numel_ = shape_numel(sizes_);
  contiguous_ = true;
  int64_t expected = 1;
  for (size_t i = sizes_.size(); i-- > 0;) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) {
      contiguous_ = false;
      break;
    }
    expected *= sizes_[i];
  }
}

AutogradMeta& TensorImpl::autograd_mut() {
  if (!autograd_) autograd_ = std::make_unique<AutogradMeta>();
  return *autograd_;
}

void TensorImpl::set_data(Storage storage, Shape sizes, Shape strides, int64_t offset,
                          DType dtype) {
  storage_ = std::move(storage);
  sizes_ = std::move(sizes);
  strides_ = std::move(strides);
  offset_ = offset;
  dtype_ = dtype;
  refresh();
}

int64_t Tensor::size(int64_t d) const {
  return sizes()[normalize_dim(d, dim(), "size")];
}

int64_t Tensor::stride(int64_t d) const {
  return strides()[normalize_dim(d, dim(), "stride")];
}

void Tensor::throw_undefined() {
  throw ValueError(
      "this tensor is undefined (it holds no data): e.g. .grad() before a backward pass reached "
      "the parameter, or a default-constructed Tensor; check .defined() first");
}

void Tensor::check_data_ptr(DType requested) const {
  GRADUS_CHECK(defined(), ValueError, "data_ptr: the tensor is undefined");
  GRADUS_CHECK(requested == dtype(), DTypeError, "data_ptr: requested ", dtype_name(requested),
               " but the tensor holds ", dtype_name(dtype()));
}

Tensor Tensor::as_strided_raw(Shape sizes, Shape strides, int64_t offset) const {
  return Tensor(std::make_shared<TensorImpl>(impl()->storage(), std::move(sizes),
                                             std::move(strides), offset, dtype()));
}

bool Tensor::requires_grad() const {
  const AutogradMeta* m = impl()->autograd();
  return m != nullptr && m->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool on) {
  GRADUS_CHECK(defined(), ValueError, "set_requires_grad: the tensor is undefined");
  GRADUS_CHECK(is_leaf(), AutogradError,
               "set_requires_grad: only leaf tensors can change requires_grad (this one was "
               "produced by an op; use detach() first)");
  GRADUS_CHECK(!on || is_floating(dtype()), DTypeError,
               "set_requires_grad: only floating-point tensors can require gradients, got ",
               dtype_name(dtype()));
  impl()->autograd_mut().requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* m = impl()->autograd();
  return m == nullptr || m->grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = impl()->autograd();
  return m != nullptr && m->grad ? Tensor(m->grad) : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (!g.defined()) {
    if (impl()->autograd()) impl()->autograd_mut().grad.reset();
    return;
  }
  GRADUS_CHECK(g.sizes() == sizes(), ShapeError, "set_grad: gradient shape ", shape_str(g.sizes()),
               " does not match the tensor's shape ", shape_str(sizes()));
  GRADUS_CHECK(g.device() == device(), DeviceError, "set_grad: gradient is on ", g.device().str(),
               " but the tensor is on ", device().str());
  impl()->autograd_mut().grad = g.impl_ptr();
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  const AutogradMeta* m = impl()->autograd();
  return m != nullptr ? m->grad_fn : none;
}

Tensor empty(const Shape& shape, TensorOptions options) {
  for (int64_t d : shape) {
    GRADUS_CHECK(d >= 0, ShapeError, "empty: negative dimension in shape ", shape_str(shape));
  }
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(options.dtype);
  auto storage = std::make_shared<StorageImpl>(nbytes, options.device);
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), shape, contiguous_strides(shape), 0,
                                        options.dtype));
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

}  // namespace gradus
