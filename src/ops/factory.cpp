// Tensor factories: constant fills, ranges and tensors from host values.
#include <cmath>

#include "ops/common.h"

namespace gradus {

using ops::backend_of;

Tensor full(const Shape& shape, double value, TensorOptions options) {
  GRADUS_PROFILE_OP("full");
  const bool requires_grad = options.requires_grad;
  options.requires_grad = false;
  Tensor t = empty(shape, options);
  if (t.numel() > 0) backend_of(t).fill(t, value);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor zeros(const Shape& shape, TensorOptions options) {
  return full(shape, 0.0, options);
}
Tensor ones(const Shape& shape, TensorOptions options) {
  return full(shape, 1.0, options);
}
Tensor empty_like(const Tensor& t) {
  GRADUS_PROFILE_OP("empty_like");
  return empty(t.sizes(), t.options());
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.sizes(), t.options());
}
Tensor ones_like(const Tensor& t) {
  return ones(t.sizes(), t.options());
}
Tensor full_like(const Tensor& t, double value) {
  return full(t.sizes(), value, t.options());
}
Tensor scalar_tensor(double value, TensorOptions options) {
  return full({}, value, options);
}

Tensor arange(double start, double end, double step, TensorOptions options) {
  GRADUS_PROFILE_OP("arange");
  GRADUS_CHECK(step != 0, ValueError, "arange: step must be non-zero");
  GRADUS_CHECK(std::isfinite(start) && std::isfinite(end), ValueError,
               "arange: start and end must be finite, got ", start, " and ", end);
  GRADUS_CHECK((end - start) / step >= 0, ValueError, "arange: step ", step,
               " goes the wrong way from ", start, " to ", end);
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = empty({n}, {options.dtype, options.device});
  if (n > 0) backend_of(t).arange(t, start, step);
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor arange(int64_t end, TensorOptions options) {
  return arange(0.0, static_cast<double>(end), 1.0, options);
}

Tensor eye(int64_t n, TensorOptions options) {
  GRADUS_PROFILE_OP("eye");
  GRADUS_CHECK(n >= 0, ValueError, "eye: n must be non-negative, got ", n);
  std::vector<double> values(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i * n + i)] = 1.0;
  return tensor(values, {n, n}, options);
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape_in, TensorOptions options) {
  GRADUS_PROFILE_OP("from_vector");
  const Shape shape = shape_in.empty() && values.size() != 1
                          ? Shape{static_cast<int64_t>(values.size())}
                          : shape_in;
  GRADUS_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()), ShapeError,
               "from_vector: ", values.size(), " values do not fill shape ", shape_str(shape), " (",
               shape_numel(shape), " elements)");
  const bool requires_grad = options.requires_grad;
  // Stage in the values' own dtype on the host, then cast/move with the backend.
  Tensor host = empty(shape, {DTypeOf<T>::value, Device::cpu()});
  if (!values.empty()) {
    std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(T));
  }
  Tensor out = host;
  if (options.dtype != host.dtype()) out = ops::cast_raw(host, options.dtype);
  if (options.device != Device::cpu()) out = out.to(options.device);
  if (requires_grad) out.set_requires_grad(true);
  return out;
}

template Tensor from_vector<float>(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, TensorOptions);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, TensorOptions);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, const Shape&, TensorOptions);

Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  GRADUS_PROFILE_OP("tensor");
  return from_vector<double>(values, shape, options);
}

}  // namespace gradus
