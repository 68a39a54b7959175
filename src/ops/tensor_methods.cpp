// Tensor methods that read or write values: in-place updates, item(), to_vector(), printing.
#include <cmath>
#include <cstdio>
#include <ostream>
#include <utility>

#include "ops/common.h"

namespace gradus {

using namespace ops;

namespace {
// In-place writes on a tensor that takes part in autograd would silently corrupt gradients;
// gradus only allows them outside grad mode (optimizer updates, initialisation) or on tensors
// without history.
void check_inplace(const Tensor& t, const char* op) {
  check_defined(op, {&t});
  GRADUS_CHECK(!(is_grad_enabled() && t.requires_grad()), AutogradError, op,
               ": in-place update of a tensor that requires grad (shape ", shape_str(t.sizes()),
               ") while grad mode is on; wrap it in gradus::NoGradGuard or use the out-of-place "
               "op");
}

// Whether an in-place add_/mul_ must go through autograd: a non-leaf in grad mode. A leaf that
// requires grad (a parameter) is refused.
bool inplace_with_history(const Tensor& t, const char* op, const Tensor* other = nullptr) {
  check_defined(op, {&t});
  if (!is_grad_enabled()) return false;
  // An operand that requires grad gives the result history even when t had none (as in PyTorch:
  // a.add_(w) makes a depend on w).
  if (!t.requires_grad() && !(other != nullptr && other->requires_grad())) return false;
  GRADUS_CHECK(!t.requires_grad() || !t.is_leaf(), AutogradError, op,
               ": in-place update of a leaf that requires grad (shape ", shape_str(t.sizes()),
               ", e.g. a parameter) while grad mode is on; wrap it in gradus::NoGradGuard (as "
               "optimizers do) or use the out-of-place op");
  return true;
}

// y.op_(...) on a non-leaf: `result` = op(y, ...) was computed out of place with autograd; its
// values go into y's storage and y's history becomes result's, so gradients flow through the
// update to y's old history. The version bump makes any node that saved y's old value fail at
// backward instead of using the new one.
Tensor& rebase_history(Tensor& self, const Tensor& result) {
  if (self.numel() > 0) backend_of(self).copy(result, self);
  self.bump_version();
  AutogradMeta& meta = self.impl()->autograd_mut();
  const AutogradMeta* from = result.impl()->autograd();
  meta.grad_fn = from ? from->grad_fn : nullptr;
  meta.output_nr = from ? from->output_nr : 0;
  meta.requires_grad = true;
  return self;
}

// self op= other (add_, mul_): other is broadcast to self's shape and cast to its dtype. With
// history, self is rebased onto out_of_place(other cast to self's dtype).
template <typename OutOfPlace>
Tensor& binary_inplace(Tensor& self, const Tensor& other, const char* op, backend::BinaryOp kernel,
                       double alpha, const OutOfPlace& out_of_place) {
  check_defined(op, {&self, &other});
  check_same_device(op, {&self, &other});
  GRADUS_CHECK(broadcast_shapes(other.sizes(), self.sizes(), op) == self.sizes(), ShapeError, op,
               ": operand of shape ", shape_str(other.sizes()),
               " cannot be broadcast to the destination's shape ", shape_str(self.sizes()));
  if (inplace_with_history(self, op, &other)) {
    return rebase_history(
        self, out_of_place(other.dtype() == self.dtype() ? other : other.to(self.dtype())));
  }
  if (self.numel() > 0) {
    backend_of(self).binary(
        kernel, self, broadcast_raw(cast_raw(other, self.dtype()), self.sizes()), self, alpha);
  }
  self.bump_version();
  return self;
}
}  // namespace

Tensor& Tensor::zero_() {
  return fill_(0.0);
}

Tensor& Tensor::fill_(double value) {
  GRADUS_PROFILE_OP("fill_");
  check_inplace(*this, "fill_");
  if (numel() > 0) backend_of(*this).fill(*this, value);
  bump_version();
  return *this;
}

namespace {
// The elements [first, last] of the storage a view can touch.
std::pair<int64_t, int64_t> element_span(const Tensor& t) {
  int64_t first = t.offset(), last = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t reach = (t.size(d) - 1) * t.stride(d);
    (reach < 0 ? first : last) += reach;
  }
  return {first, last};
}

// Whether writing dst can change what is read from src: two different views whose spans in one
// storage intersect. The backends' copies read and write in chunks (a memcpy, a kernel's
// blocks), so such a copy must read from a snapshot of src.
bool may_overlap(const Tensor& dst, const Tensor& src) {
  if (dst.impl()->storage() != src.impl()->storage()) return false;
  if (dst.offset() == src.offset() && dst.sizes() == src.sizes() && dst.strides() == src.strides())
    return false;  // the same view: every element is copied onto itself
  const auto [d0, d1] = element_span(dst);
  const auto [s0, s1] = element_span(src);
  return d0 <= s1 && s0 <= d1;
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  GRADUS_PROFILE_OP("copy_");
  check_inplace(*this, "copy_");
  check_defined("copy_", {&src});
  broadcast_shapes(src.sizes(), sizes(), "copy_");
  GRADUS_CHECK(broadcast_shapes(src.sizes(), sizes(), "copy_") == sizes(), ShapeError,
               "copy_: source of shape ", shape_str(src.sizes()),
               " cannot be broadcast to the destination's shape ", shape_str(sizes()));
  if (numel() > 0) {
    Tensor s = src.device() == device() ? src : src.to(device());
    if (may_overlap(*this, s)) s = s.clone();
    backend_of(*this).copy(broadcast_raw(s, sizes()), *this);
  }
  bump_version();
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  GRADUS_PROFILE_OP("add_");
  return binary_inplace(*this, other, "add_", backend::BinaryOp::add, alpha,
                        [&](const Tensor& b) { return add(*this, b, alpha); });
}

Tensor& Tensor::mul_(double value) {
  GRADUS_PROFILE_OP("mul_");
  if (inplace_with_history(*this, "mul_")) return rebase_history(*this, mul(*this, value));
  if (numel() > 0) backend_of(*this).unary(backend::UnaryOp::affine, *this, *this, value, 0.0);
  bump_version();
  return *this;
}

Tensor& Tensor::mul_(const Tensor& other) {
  GRADUS_PROFILE_OP("mul_");
  return binary_inplace(*this, other, "mul_", backend::BinaryOp::mul, 1.0, [&](const Tensor& b) {
    // b's gradient needs this tensor's value before the update: multiply a copy, so that the
    // product's node does not save the storage the update overwrites.
    return mul(b.requires_grad() ? clone() : *this, b);
  });
}

void Tensor::set_data(const Tensor& other) const {
  check_defined("set_data", {this, &other});
  impl()->set_data(other.impl()->storage(), other.sizes(), other.strides(), other.offset(),
                   other.dtype());
}

double Tensor::item() const {
  check_defined("item", {this});
  GRADUS_CHECK(numel() == 1, ValueError, "item: a tensor with ", numel(),
               " elements cannot be converted to a scalar (shape ", shape_str(sizes()), ")");
  return to_vector<double>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_defined("to_vector", {this});
  Tensor host = contiguous_raw(cast_raw(detach(), DTypeOf<T>::value));
  if (!host.device().is_cpu()) host = host.to(Device::cpu());
  std::vector<T> out(static_cast<size_t>(numel()));
  if (!out.empty()) std::memcpy(out.data(), host.raw_data(), out.size() * sizeof(T));
  return out;
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

// ------------------------------------------------------------------------------------ printing
namespace {

// PyTorch's default print options: 4 decimals, scientific notation when the magnitudes span
// more than 1e8 or exceed 1e8 / fall below 1e-4, summarised with "..." above 1000 elements.
struct Formatter {
  bool floating = true;
  bool boolean = false;
  bool scientific = false;
  bool integral_values = false;
  int width = 1;

  std::string format(double v) const {
    char buf[64];
    if (boolean) {
      std::snprintf(buf, sizeof buf, "%s", v != 0 ? "True" : "False");
    } else if (!floating) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    } else if (std::isnan(v)) {
      std::snprintf(buf, sizeof buf, "nan");
    } else if (std::isinf(v)) {
      std::snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
    } else if (scientific) {
      std::snprintf(buf, sizeof buf, "%.4e", v);
    } else if (integral_values) {
      std::snprintf(buf, sizeof buf, "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof buf, "%.4f", v);
    }
    return buf;
  }
};

constexpr int64_t kSummariseAbove = 1000;
constexpr int64_t kEdgeItems = 3;

void print_dim(std::ostream& os, const std::vector<double>& v, const Shape& shape,
               const Shape& strides, int64_t dim, int64_t base, const Formatter& f, bool summarise,
               int indent) {
  const int64_t n = shape[dim];
  os << '[';
  auto emit = [&](int64_t i) {
    if (dim + 1 == static_cast<int64_t>(shape.size())) {
      std::string s = f.format(v[static_cast<size_t>(base + i * strides[dim])]);
      os << std::string(std::max<int>(0, f.width - static_cast<int>(s.size())), ' ') << s;
    } else {
      print_dim(os, v, shape, strides, dim + 1, base + i * strides[dim], f, summarise, indent + 1);
    }
  };
  const bool cut = summarise && n > 2 * kEdgeItems;
  // Between innermost values ", "; between rows a comma, one newline per remaining dim, indent.
  std::ostringstream sep_stream;
  if (dim + 1 == static_cast<int64_t>(shape.size())) {
    sep_stream << ", ";
  } else {
    sep_stream << ',';
    for (size_t k = static_cast<size_t>(dim) + 1; k < shape.size(); ++k) sep_stream << '\n';
    for (int k = 0; k < indent + 1; ++k) sep_stream << ' ';
  }
  const std::string sep = sep_stream.str();
  bool first = true;
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == kEdgeItems) {
      os << sep << "...";
      i = n - kEdgeItems;
    }
    if (!first) os << sep;
    first = false;
    emit(i);
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  const std::vector<double> v = to_vector<double>();
  Formatter f;
  f.floating = is_floating(dtype());
  f.boolean = dtype() == DType::boolean;
  if (f.floating) {
    double max_abs = 0, min_abs = INFINITY;
    bool all_integral = true;
    for (double x : v) {
      if (!std::isfinite(x)) continue;
      max_abs = std::max(max_abs, std::abs(x));
      if (x != 0) min_abs = std::min(min_abs, std::abs(x));
      all_integral = all_integral && x == std::floor(x);
    }
    f.integral_values = all_integral && max_abs < 1e8;
    f.scientific = !f.integral_values && (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs > 0) ||
                                          (min_abs != INFINITY && max_abs / min_abs > 1000));
  }
  for (double x : v) f.width = std::max<int>(f.width, static_cast<int>(f.format(x).size()));
  const char* prefix = "tensor(";
  os << prefix;
  if (dim() == 0) {
    os << f.format(v[0]);
  } else {
    const Shape strides = contiguous_strides(sizes());
    print_dim(os, v, sizes(), strides, 0, 0, f, numel() > kSummariseAbove, 7);
  }
  if (dtype() != DType::f32 && dtype() != DType::i64 && dtype() != DType::boolean) {
    os << ", dtype=" << dtype_name(dtype());
  }
  if (!device().is_cpu()) os << ", device='" << device().str() << "'";
  if (requires_grad()) os << (grad_fn() ? ", grad_fn" : ", requires_grad=True");
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

}  // namespace gradus
