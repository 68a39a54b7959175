// Autocast: the policy table and the casts it asks for (gradus/amp/autocast.h, docs/amp.md).
#include "ops/autocast.h"

#include <array>
#include <unordered_map>
#include <utility>

#include "gradus/autograd.h"
#include "gradus/core/error.h"

namespace gradus {
namespace ops {
namespace detail {
thread_local AutocastState t_autocast;
}  // namespace detail

namespace {

using amp::CastPolicy;

// The one table. An op absent from it runs in its inputs' dtype. Every op named here calls
// AutocastInputs with this name at its top (tests/amp/autocast_test.cpp checks each category).
constexpr std::array<std::pair<std::string_view, CastPolicy>, 30> kPolicy{{
    // Tensor-core ops: 16-bit operands, float32 accumulation.
    {"matmul", CastPolicy::lower},
    {"mm", CastPolicy::lower},
    {"bmm", CastPolicy::lower},
    {"linear", CastPolicy::lower},
    {"conv2d", CastPolicy::lower},
    {"scaled_dot_product_attention", CastPolicy::lower},
    // Range- or precision-sensitive: float32.
    {"exp", CastPolicy::float32},
    {"log", CastPolicy::float32},
    {"log1p", CastPolicy::float32},
    {"expm1", CastPolicy::float32},
    {"pow", CastPolicy::float32},
    {"rsqrt", CastPolicy::float32},
    {"reciprocal", CastPolicy::float32},
    {"softplus", CastPolicy::float32},
    {"sum", CastPolicy::float32},
    {"mean", CastPolicy::float32},
    {"prod", CastPolicy::float32},
    {"var", CastPolicy::float32},
    {"std", CastPolicy::float32},
    {"norm", CastPolicy::float32},
    {"logsumexp", CastPolicy::float32},
    {"softmax", CastPolicy::float32},
    {"log_softmax", CastPolicy::float32},
    {"cross_entropy", CastPolicy::float32},
    {"nll_loss", CastPolicy::float32},
    {"mse_loss", CastPolicy::float32},
    {"binary_cross_entropy_with_logits", CastPolicy::float32},
    {"batch_norm", CastPolicy::float32},
    {"layer_norm", CastPolicy::float32},
    {"rms_norm", CastPolicy::float32},
}};
// Ops with several inputs (binary and ternary elementwise, cat, stack) need no entry: they
// promote to the widest input dtype by themselves.

// Parameters cast to the autocast dtype in the current outermost scope. The entry keeps the
// source alive, so its address cannot be reused by another tensor while cached.
struct CachedCast {
  Tensor source;
  uint64_t version;
  Tensor cast;
};
thread_local std::unordered_map<const void*, CachedCast> t_cache;
thread_local int t_depth = 0;

bool is_16bit(DType t) {
  return t == DType::f16 || t == DType::bf16;
}

Tensor cast_lower(const Tensor& t, DType target) {
  const AutocastState& s = detail::t_autocast;
  const bool cacheable =
      s.cache_weights && t.is_leaf() && t.requires_grad() && is_grad_enabled() && t_depth > 0;
  if (!cacheable) return t.to(target);
  auto it = t_cache.find(t.impl());
  if (it != t_cache.end() && it->second.version == t.version() &&
      it->second.cast.dtype() == target) {
    return it->second.cast;
  }
  Tensor cast = t.to(target);
  t_cache[t.impl()] = CachedCast{t, t.version(), cast};
  return cast;
}

}  // namespace

void AutocastInputs::apply(std::string_view op, const Tensor* const* inputs, size_t n) {
  const CastPolicy policy = amp::autocast_policy(op);
  if (policy == CastPolicy::none) return;
  const DType target = detail::t_autocast.dtype;
  out_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = *inputs[i];
    Tensor c = t;
    if (t.defined() && is_floating(t.dtype())) {
      if (policy == CastPolicy::lower && t.dtype() != DType::f64 && t.dtype() != target) {
        c = cast_lower(t, target);
      } else if (policy == CastPolicy::float32 && is_16bit(t.dtype())) {
        c = t.to(DType::f32);
      }
    }
    changed_ = changed_ || c.impl() != t.impl();
    out_.push_back(std::move(c));
  }
}

}  // namespace ops

namespace amp {

Autocast::Autocast(DType dtype, bool enabled, bool cache_weights) {
  GRADUS_CHECK(!enabled || dtype == DType::bf16 || dtype == DType::f16, DTypeError,
               "Autocast: the low-precision dtype must be bf16 or f16, got ", dtype_name(dtype));
  ops::AutocastState& s = ops::detail::t_autocast;
  prev_enabled_ = s.enabled;
  prev_dtype_ = s.dtype;
  prev_cache_ = s.cache_weights;
  s.enabled = enabled;
  if (enabled) s.dtype = dtype;
  s.cache_weights = cache_weights;
  ++ops::t_depth;
}

Autocast::~Autocast() {
  ops::AutocastState& s = ops::detail::t_autocast;
  s.enabled = prev_enabled_;
  s.dtype = prev_dtype_;
  s.cache_weights = prev_cache_;
  if (--ops::t_depth == 0) ops::t_cache.clear();
}

bool is_autocast_enabled() {
  return ops::detail::t_autocast.enabled;
}

DType autocast_dtype() {
  return ops::detail::t_autocast.dtype;
}

CastPolicy autocast_policy(std::string_view op) {
  for (const auto& [name, policy] : ops::kPolicy) {
    if (name == op) return policy;
  }
  return CastPolicy::none;
}

size_t autocast_cache_size() {
  return ops::t_cache.size();
}

}  // namespace amp
}  // namespace gradus
