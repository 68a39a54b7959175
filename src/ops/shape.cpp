// View and shape ops: views share storage with their input (backward maps the gradient back to
// the input's shape); cat/stack copy.
#include <algorithm>
#include <numeric>
#include <optional>

#include "gradus/core/kernel_counts.h"
#include "ops/common.h"

namespace gradus {

using namespace ops;

namespace {

Shape infer_shape(const Shape& requested, int64_t numel, const char* op) {
  Shape shape = requested;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      GRADUS_CHECK(infer < 0, ShapeError, op, ": only one dimension can be -1, got ",
                   shape_str(requested));
      infer = static_cast<int>(i);
    } else {
      GRADUS_CHECK(shape[i] >= 0, ShapeError, op, ": invalid size ", shape[i], " in ",
                   shape_str(requested));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    GRADUS_CHECK(known != 0 && numel % known == 0, ShapeError, op, ": shape ", shape_str(requested),
                 " is invalid for input of size ", numel);
    shape[infer] = numel / known;
  }
  GRADUS_CHECK(shape_numel(shape) == numel, ShapeError, op, ": shape ", shape_str(requested),
               " is invalid for input of size ", numel);
  return shape;
}

// Strides that let `new_shape` view memory laid out as (old_shape, old_strides), if any
// (PyTorch's rule: each run of merged dims must be contiguous within itself).
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides,
                                  const Shape& new_shape) {
  Shape new_strides(new_shape.size());
  if (old_shape.empty() || shape_numel(old_shape) == 0) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t tensor_d = static_cast<int64_t>(old_shape.size()) - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old_shape[tensor_d];
    if (tensor_d == 0 || (old_shape[tensor_d - 1] != 1 &&
                          old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = old_strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

// A view of x whose gradient is reshaped back to x's shape.
Tensor reshape_view(const Tensor& x, const Shape& shape, const Shape& strides, const char* op) {
  Tensor out = x.as_strided_raw(shape, strides, x.offset());
  return record(op, out, {x}, [in = x.sizes()](const TensorList& g, const NeedsGrad&) {
    return TensorList{g[0].reshape(in)};
  });
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  GRADUS_PROFILE_OP("view");
  check_defined("view", {this});
  const Shape shape = infer_shape(requested, numel(), "view");
  auto strides = view_strides(sizes(), this->strides(), shape);
  GRADUS_CHECK(strides.has_value(), ShapeError, "view: shape ", shape_str(shape),
               " is not compatible with the input's size ", shape_str(sizes()), " and strides ",
               shape_str(this->strides()), "; use reshape() (which copies) instead");
  return reshape_view(*this, shape, *strides, "view");
}

Tensor Tensor::reshape(const Shape& requested) const {
  GRADUS_PROFILE_OP("reshape");
  check_defined("reshape", {this});
  const Shape shape = infer_shape(requested, numel(), "reshape");
  if (shape == sizes()) return *this;
  if (auto strides = view_strides(sizes(), this->strides(), shape)) {
    return reshape_view(*this, shape, *strides, "reshape");
  }
  return contiguous().view(shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  GRADUS_PROFILE_OP("flatten");
  check_defined("flatten", {this});
  if (dim() == 0) return reshape({1});
  const int64_t s = normalize_dim(start_dim, dim(), "flatten");
  const int64_t e = normalize_dim(end_dim, dim(), "flatten");
  GRADUS_CHECK(s <= e, ValueError, "flatten: start_dim (", start_dim, ") comes after end_dim (",
               end_dim, ")");
  Shape shape(sizes().begin(), sizes().begin() + s);
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= size(i);
  shape.push_back(merged);
  shape.insert(shape.end(), sizes().begin() + e + 1, sizes().end());
  return reshape(shape);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  GRADUS_PROFILE_OP("permute");
  check_defined("permute", {this});
  GRADUS_CHECK(static_cast<int64_t>(dims.size()) == dim(), ShapeError, "permute: got ", dims.size(),
               " dimensions for a tensor of shape ", shape_str(sizes()));
  Shape shape(dims.size()), strides(dims.size());
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int d = normalize_dim(dims[i], dim(), "permute");
    GRADUS_CHECK(inverse[d] < 0, ValueError, "permute: dimension ", d, " repeats in the order");
    inverse[d] = static_cast<int64_t>(i);
    shape[i] = size(d);
    strides[i] = stride(d);
  }
  Tensor out = as_strided_raw(shape, strides, offset());
  return record("permute", out, {*this}, [inverse](const TensorList& g, const NeedsGrad&) {
    return TensorList{g[0].permute(inverse)};
  });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  GRADUS_PROFILE_OP("transpose");
  check_defined("transpose", {this});
  if (dim() == 0) return *this;
  std::vector<int64_t> order(static_cast<size_t>(dim()));
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[normalize_dim(d0, dim(), "transpose")],
            order[normalize_dim(d1, dim(), "transpose")]);
  return permute(order);
}

Tensor Tensor::t() const {
  GRADUS_PROFILE_OP("t");
  check_defined("t", {this});
  GRADUS_CHECK(dim() <= 2, ShapeError, "t: expects a tensor with <= 2 dimensions, got shape ",
               shape_str(sizes()), " (use transpose(d0, d1))");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  GRADUS_PROFILE_OP("slice");
  check_defined("slice", {this});
  GRADUS_CHECK(dim() > 0, ShapeError, "slice: cannot slice a 0-d tensor");
  GRADUS_CHECK(step > 0, ValueError, "slice: step must be positive, got ", step);
  const int dd = normalize_dim(d, dim(), "slice");
  const int64_t n = size(dd);
  // Python semantics: negative indices count from the end; out-of-range bounds are clamped.
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = sizes(), strides = this->strides();
  shape[dd] = (end - start + step - 1) / step;
  strides[dd] *= step;
  Tensor out = as_strided_raw(shape, strides, offset() + start * stride(dd));
  return record(
      "slice", out, {*this},
      [in = InputMeta(*this), dd, start, end, step](const TensorList& g, const NeedsGrad&) {
        Tensor gx = zeros(in.shape, g[0].options());
        gx.slice(dd, start, end, step).copy_(g[0]);
        return TensorList{gx};
      });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  GRADUS_PROFILE_OP("narrow");
  check_defined("narrow", {this});
  const int dd = normalize_dim(d, dim(), "narrow");
  const int64_t n = size(dd);
  if (start < 0) start += n;
  GRADUS_CHECK(start >= 0 && length >= 0 && start + length <= n, IndexError, "narrow: range [",
               start, ", ", start + length, ") is out of bounds for dimension ", dd, " of size ",
               n);
  return slice(dd, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  GRADUS_PROFILE_OP("select");
  check_defined("select", {this});
  const int dd = normalize_dim(d, dim(), "select");
  const int64_t n = size(dd);
  GRADUS_CHECK(index >= -n && index < n, IndexError, "select: index ", index,
               " is out of bounds for dimension ", dd, " of size ", n);
  if (index < 0) index += n;
  return slice(dd, index, index + 1).squeeze(dd);
}

Tensor Tensor::expand(const Shape& requested) const {
  GRADUS_PROFILE_OP("expand");
  check_defined("expand", {this});
  const int64_t n = static_cast<int64_t>(requested.size());
  GRADUS_CHECK(n >= dim(), ShapeError, "expand: the target shape ", shape_str(requested),
               " has fewer dimensions than the input ", shape_str(sizes()));
  Shape shape(requested.size()), strides(requested.size(), 0);
  const int64_t lead = n - dim();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t want = requested[i];
    if (i < lead) {
      GRADUS_CHECK(want >= 0, ShapeError,
                   "expand: size -1 is not allowed in a new leading "
                   "dimension (target ",
                   shape_str(requested), ")");
      shape[i] = want;
      continue;
    }
    const int64_t have = size(i - lead);
    if (want == -1 || want == have) {
      shape[i] = have;
      strides[i] = stride(i - lead);
    } else {
      GRADUS_CHECK(have == 1, ShapeError, "expand: cannot expand ", shape_str(sizes()), " to ",
                   shape_str(requested), " (dimension ", i, ": ", have, " to ", want, ")");
      shape[i] = want;
    }
  }
  if (shape == sizes()) return *this;
  Tensor out = as_strided_raw(shape, strides, offset());
  return record("expand", out, {*this},
                [in = InputMeta(*this)](const TensorList& g, const NeedsGrad&) {
                  return TensorList{reduce_grad(g[0], in)};
                });
}

Tensor Tensor::squeeze() const {
  GRADUS_PROFILE_OP("squeeze");
  check_defined("squeeze", {this});
  Shape shape;
  for (int64_t s : sizes()) {
    if (s != 1) shape.push_back(s);
  }
  return reshape(shape);
}

Tensor Tensor::squeeze(int64_t d) const {
  GRADUS_PROFILE_OP("squeeze");
  check_defined("squeeze", {this});
  if (dim() == 0) return *this;
  const int dd = normalize_dim(d, dim(), "squeeze");
  if (size(dd) != 1) return *this;
  Shape shape = sizes();
  shape.erase(shape.begin() + dd);
  return reshape(shape);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  GRADUS_PROFILE_OP("unsqueeze");
  check_defined("unsqueeze", {this});
  const int dd = normalize_dim(d, dim() + 1, "unsqueeze");
  Shape shape = sizes();
  shape.insert(shape.begin() + dd, 1);
  return reshape(shape);
}

Tensor Tensor::contiguous() const {
  GRADUS_PROFILE_OP("contiguous");
  check_defined("contiguous", {this});
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  GRADUS_PROFILE_OP("clone");
  check_defined("clone", {this});
  Tensor out = empty(sizes(), options());
  if (numel() > 0) backend_of(*this).copy(*this, out);
  return record("clone", out, {*this},
                [](const TensorList& g, const NeedsGrad&) { return TensorList{g[0]}; });
}

Tensor Tensor::to(Device device, DType dtype) const {
  GRADUS_PROFILE_OP("to");
  check_defined("to", {this});
  if (device == this->device() && dtype == this->dtype()) return *this;
  Tensor out;
  if (device == this->device()) {
    out = empty(sizes(), {dtype, device});
    if (numel() > 0) backend_of(*this).copy(*this, out);
  } else {
    // Cross-device: make the source dense in the target dtype, then one host/device transfer.
    Tensor src = contiguous_raw(cast_raw(*this, dtype));
    out = empty(sizes(), {dtype, device});
    if (numel() > 0) {
      if (this->device().is_cpu()) {
        GRADUS_PROFILE_SCOPE(copy, "memcpy_h2d");
        backend::backend_for(device.type()).copy_from_host(src.raw_data(), out);
      } else if (device.is_cpu()) {
        GRADUS_PROFILE_SCOPE(copy, "memcpy_d2h");
        backend_of(src).copy_to_host(src, out.raw_data());
      } else if (device.type() == this->device().type()) {  // e.g. cuda:0 -> cuda:1: peer copy
        GRADUS_PROFILE_SCOPE(copy, "memcpy_d2d");
        backend_of(src).copy_between_devices(src, out);
      } else {  // between device types: through the host
        Tensor staged = src.to(Device::cpu());
        GRADUS_PROFILE_SCOPE(copy, "memcpy_h2d");
        backend::backend_for(device.type()).copy_from_host(staged.raw_data(), out);
      }
    }
  }
  if (!is_floating(dtype)) return out;  // integer results carry no gradient
  return record("to", out, {*this},
                [src_device = this->device(), src_dtype = this->dtype()](const TensorList& g,
                                                                         const NeedsGrad&) {
                  return TensorList{g[0].to(src_device, src_dtype)};
                });
}

Tensor Tensor::to(Device device) const {
  return to(device, dtype());
}
Tensor Tensor::to(DType dtype) const {
  return to(device(), dtype);
}

// ------------------------------------------------------------------------ cat / stack / split
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  GRADUS_PROFILE_OP("cat");
  GRADUS_CHECK(!tensors.empty(), ValueError, "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  check_defined("cat", {&first});
  GRADUS_CHECK(first.dim() > 0, ShapeError,
               "cat: zero-dimensional tensors cannot be "
               "concatenated (use stack)");
  const int d = normalize_dim(dim, first.dim(), "cat");
  DType dtype = first.dtype();
  Shape shape = first.sizes();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_defined("cat", {&t});
    check_same_device("cat", {&first, &t});
    GRADUS_CHECK(t.dim() == first.dim(), ShapeError, "cat: tensor ", i, " has shape ",
                 shape_str(t.sizes()), " but tensor 0 has shape ", shape_str(first.sizes()),
                 " (ranks differ)");
    for (int64_t k = 0; k < t.dim(); ++k) {
      GRADUS_CHECK(k == d || t.size(k) == first.size(k), ShapeError, "cat: tensor ", i,
                   " has shape ", shape_str(t.sizes()), ", expected ", shape_str(first.sizes()),
                   " except in dimension ", d);
    }
    shape[d] += t.size(d);
    dtype = promote_types(dtype, t.dtype());
  }
  Tensor out = empty(shape, {dtype, first.device()});
  int64_t at = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) {
    if (t.size(d) > 0) {
      Tensor dst = out.detach().slice(d, at, at + t.size(d));
      backend_of(t).copy(cast_raw(t, dtype), dst);
    }
    sizes.push_back(t.size(d));
    at += t.size(d);
  }
  std::vector<InputMeta> metas;
  for (const Tensor& t : tensors) metas.emplace_back(t);
  return record("cat", out, tensors,
                [metas, sizes, d](const TensorList& g, const NeedsGrad& needs) {
                  TensorList grads(metas.size());
                  int64_t offset = 0;
                  for (size_t i = 0; i < metas.size(); ++i) {
                    if (needs[i]) {
                      grads[i] = reduce_grad(g[0].slice(d, offset, offset + sizes[i]), metas[i]);
                    }
                    offset += sizes[i];
                  }
                  return grads;
                });
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  GRADUS_PROFILE_OP("stack");
  GRADUS_CHECK(!tensors.empty(), ValueError, "stack: expected a non-empty list of tensors");
  check_defined("stack", {&tensors[0]});
  const int64_t d = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_defined("stack", {&tensors[i]});
    GRADUS_CHECK(tensors[i].sizes() == tensors[0].sizes(), ShapeError, "stack: tensor ", i,
                 " has shape ", shape_str(tensors[i].sizes()), " but tensor 0 has shape ",
                 shape_str(tensors[0].sizes()));
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

namespace ops {
namespace {
// The pieces as one contiguous view when they already lie where cat would put them: consecutive
// slices along d of one storage with one dtype and the same strides (the gradients of a q, k, v
// split that the attention kernel writes into one buffer). Empty when they do not.
std::optional<Tensor> joined_view(const TensorList& pieces, int d, const Shape& whole) {
  const Tensor& first = pieces[0];
  if (!first.defined()) return std::nullopt;
  int64_t at = 0;
  for (const Tensor& p : pieces) {
    if (!p.defined() || p.impl()->storage().get() != first.impl()->storage().get() ||
        p.dtype() != first.dtype() || p.strides() != first.strides() ||
        p.offset() != first.offset() + at * first.stride(d)) {
      return std::nullopt;
    }
    at += p.size(d);
  }
  if (at != whole[d]) return std::nullopt;
  // Contiguous: no element aliases another (pieces of a broadcast zero would), so the result is
  // safe to update in place as a .grad.
  Tensor joined = first.as_strided_raw(whole, first.strides(), first.offset());
  if (!joined.is_contiguous()) return std::nullopt;
  return joined;
}

// The pieces of a split, views of x along d of the given lengths, as one autograd node whose
// backward is a single cat of their gradients (the engine passes zeros for pieces that got none),
// or none at all when those gradients already lie side by side (joined_view).
// Recording each piece as its own slice would give each a zero-filled input-sized gradient to be
// summed: for a transformer's q, k, v split, three fills, three copies and two adds of the whole
// [B, T, 3C] per layer.
std::vector<Tensor> record_split(const Tensor& x, const std::vector<int64_t>& lengths, int d) {
  std::vector<Tensor> pieces;
  pieces.reserve(lengths.size());
  int64_t at = 0;
  for (const int64_t length : lengths) {
    Shape shape = x.sizes();
    shape[d] = length;
    pieces.push_back(x.as_strided_raw(shape, x.strides(), x.offset() + at * x.stride(d)));
    at += length;
  }
  return record_multi("split", std::move(pieces), {x},
                      [d, whole = x.sizes()](const TensorList& g, const NeedsGrad&) {
                        if (auto joined = joined_view(g, d, whole)) {
                          gradus::detail::count_kernel("split.joined_grad");
                          return TensorList{*joined};
                        }
                        gradus::detail::count_kernel("split.cat_grad");
                        return TensorList{cat(g, d)};
                      });
}
}  // namespace
}  // namespace ops

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  GRADUS_PROFILE_OP("split");
  check_defined("split", {&x});
  GRADUS_CHECK(split_size > 0, ValueError, "split: split_size must be positive, got ", split_size);
  const int d = normalize_dim(dim, x.dim(), "split");
  std::vector<int64_t> lengths;
  for (int64_t at = 0; at < x.size(d); at += split_size) {
    lengths.push_back(std::min(split_size, x.size(d) - at));
  }
  if (lengths.empty()) return {x};
  return ops::record_split(x, lengths, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  GRADUS_PROFILE_OP("split");
  check_defined("split", {&x});
  const int d = normalize_dim(dim, x.dim(), "split");
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  GRADUS_CHECK(total == x.size(d), ShapeError, "split: sizes sum to ", total, " but dimension ", d,
               " has size ", x.size(d));
  for (const int64_t s : sizes) GRADUS_CHECK(s >= 0, ValueError, "split: negative size ", s);
  return ops::record_split(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  GRADUS_PROFILE_OP("chunk");
  check_defined("chunk", {&x});
  GRADUS_CHECK(chunks > 0, ValueError, "chunk: number of chunks must be positive, got ", chunks);
  const int d = normalize_dim(dim, x.dim(), "chunk");
  const int64_t size = (x.size(d) + chunks - 1) / chunks;
  return split(x, std::max<int64_t>(size, 1), d);
}

}  // namespace gradus
