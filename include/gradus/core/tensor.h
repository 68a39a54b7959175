// Tensor: a cheap, copyable handle to a shared TensorImpl (storage + shape/strides/offset + dtype +
// autograd metadata). Views share storage. Row-major like PyTorch.
//
// The methods declared here that compute something (reshape, to, sum, ...) are ops: they are
// defined in gradus::autograd (src/ops), so gradus::core itself depends on nothing above it.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "gradus/core/device.h"
#include "gradus/core/dtype.h"
#include "gradus/core/error.h"
#include "gradus/core/shape.h"
#include "gradus/core/storage.h"

namespace gradus {

class Tensor;
namespace autograd {
class Node;
}

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool requires_grad = false;
};

using GradHook = std::function<Tensor(const Tensor& grad)>;  // may return an undefined Tensor
using PostAccumulateHook = std::function<void(Tensor& param)>;

// Autograd state of one tensor. Only tensors that take part in a graph carry one.
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  uint32_t output_nr = 0;                   // which output of grad_fn this tensor is
  std::shared_ptr<class TensorImpl> grad;   // accumulated gradient (leaves, or retain_grad)
  bool retains_grad = false;
  std::vector<GradHook> hooks;
  std::vector<PostAccumulateHook> post_accumulate_hooks;
  // The accumulator node of a leaf, created on first use and shared by every graph through it.
  std::weak_ptr<autograd::Node> grad_accumulator;
};

class TensorImpl {
 public:
  TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype);

  const Storage& storage() const { return storage_; }
  const Shape& sizes() const { return sizes_; }
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_->device(); }
  int64_t numel() const { return numel_; }
  bool is_contiguous() const { return contiguous_; }
  void* data() const {
    if (storage_->data() == nullptr && storage_->nbytes() != 0) detail::throw_released_storage();
    return static_cast<char*>(storage_->data()) +
           offset_ * static_cast<int64_t>(dtype_size(dtype_));
  }

  AutogradMeta* autograd() const { return autograd_.get(); }
  AutogradMeta& autograd_mut();

  // Replaces the data this impl refers to (module.to(device) keeps parameter identity this way).
  void set_data(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype);

 private:
  void refresh();
  Storage storage_;
  Shape sizes_;
  Shape strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::f32;
  int64_t numel_ = 0;
  bool contiguous_ = true;
  std::unique_ptr<AutogradMeta> autograd_;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata (gradus::core) ----
  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  // The accessors below throw ValueError on an undefined tensor (e.g. p.grad() before any
  // backward) instead of dereferencing null.
  int64_t dim() const { return static_cast<int64_t>(checked()->sizes().size()); }
  const Shape& shape() const { return checked()->sizes(); }
  const Shape& sizes() const { return checked()->sizes(); }
  const Shape& strides() const { return checked()->strides(); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return checked()->numel(); }
  int64_t offset() const { return checked()->offset(); }
  DType dtype() const { return checked()->dtype(); }
  Device device() const { return checked()->device(); }
  TensorOptions options() const { return {dtype(), device(), false}; }
  bool is_contiguous() const { return checked()->is_contiguous(); }
  bool is_cuda() const { return device().is_cuda(); }
  size_t element_size() const { return dtype_size(dtype()); }
  void* raw_data() const { return checked()->data(); }
  // Typed pointer to the first element; throws DTypeError if T does not match dtype().
  template <typename T>
  T* data_ptr() const {
    check_data_ptr(DTypeOf<T>::value);
    return static_cast<T*>(checked()->data());
  }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }
  uint64_t version() const { return checked()->storage()->version(); }
  void bump_version() const { checked()->storage()->bump_version(); }
  // A view of the same storage with new sizes/strides/offset (no checks, no autograd).
  Tensor as_strided_raw(Shape sizes, Shape strides, int64_t offset) const;

  // ---- autograd metadata (gradus::core) ----
  bool requires_grad() const;
  // Only for leaves (tensors without grad_fn) of floating dtype. Returns *this for chaining.
  Tensor& set_requires_grad(bool on = true);
  bool is_leaf() const;
  Tensor grad() const;  // undefined until a backward pass reaches this tensor
  void set_grad(const Tensor& g) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  void retain_grad() const;
  // Called with the gradient w.r.t. this tensor before it is used or accumulated; a hook may
  // return a replacement gradient.
  void register_hook(GradHook hook) const;
  // Leaves only: called after the gradient was accumulated into .grad (DDP uses this).
  void register_post_accumulate_grad_hook(PostAccumulateHook hook) const;

  // ---- ops (gradus::autograd) ----
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // shares storage, no history
  Tensor& detach_();

  Tensor view(const Shape& shape) const;     // requires compatible strides
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(Device::cpu()); }

  Tensor sum() const;
  Tensor mean() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;

  // In-place (bump the version counter). While grad mode is on, a tensor that requires grad may
  // be updated in place only by add_ and mul_, and only when it is not a leaf (y = f(x);
  // y.mul_(2)): its history is then rebased onto the update, as in PyTorch, and a node that had
  // saved y's old value fails at backward. Leaves that require grad (parameters) are refused
  // (update them under NoGradGuard), as are zero_/fill_/copy_ on any tensor that requires grad.
  // An add_ / mul_ operand that requires grad gives the updated tensor history even if it had
  // none (a.mul_(w) makes a depend on w).
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // broadcasts and casts src
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(double value);
  Tensor& mul_(const Tensor& other);  // broadcasts other to this shape and casts it to this dtype
  // Makes this impl refer to other's data (shape, dtype and device may change); history is kept.
  void set_data(const Tensor& other) const;

  // Reads one value (numel() == 1) to the host.
  double item() const;
  template <typename T>
  T item() const {
    return static_cast<T>(item());
  }
  // Copies all values to a host vector of T (casting).
  template <typename T>
  std::vector<T> to_vector() const;

  std::string str() const;  // PyTorch-like text: tensor([[1.0000, 2.0000], ...])

 private:
  TensorImpl* checked() const {
    if (impl_ == nullptr) [[unlikely]]
      throw_undefined();
    return impl_.get();
  }
  [[noreturn]] static void throw_undefined();
  void check_data_ptr(DType requested) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Uninitialised memory (gradus::core). All other factories are ops.
Tensor empty(const Shape& shape, TensorOptions options = {});

}  // namespace gradus
