// Random tensors. Every draw reserves Philox blocks from a Generator (default: the global one),
// so the same seed gives the same numbers on every device (see gradus/core/random.h).
#include <cmath>

#include "ops/common.h"

namespace gradus {

using ops::backend_of;

namespace {
Generator& pick(Generator* gen) {
  return gen != nullptr ? *gen : default_generator();
}
uint64_t blocks_for(int64_t n) {
  return static_cast<uint64_t>((n + 3) / 4);
}

Tensor make(const Shape& shape, TensorOptions options, const char* op) {
  GRADUS_CHECK(is_floating(options.dtype), DTypeError, op, ": expected a floating dtype, got ",
               dtype_name(options.dtype));
  return empty(shape, {options.dtype, options.device});
}

Tensor finish(Tensor t, bool requires_grad) {
  if (requires_grad) t.set_requires_grad(true);
  return t;
}
}  // namespace

Tensor& uniform_(Tensor& t, double lo, double hi, Generator* gen) {
  GRADUS_PROFILE_OP("uniform_");
  GRADUS_CHECK(lo <= hi, ValueError, "uniform_: lo (", lo, ") must not exceed hi (", hi, ")");
  if (t.numel() == 0) return t;
  Tensor target = t.is_contiguous() ? t : empty(t.sizes(), t.options());
  backend_of(t).uniform(target, pick(gen).reserve(blocks_for(t.numel())), lo, hi);
  if (!target.same(t)) backend_of(t).copy(target, t);
  t.bump_version();
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  GRADUS_PROFILE_OP("normal_");
  GRADUS_CHECK(std >= 0, ValueError, "normal_: std must be non-negative, got ", std);
  if (t.numel() == 0) return t;
  Tensor target = t.is_contiguous() ? t : empty(t.sizes(), t.options());
  backend_of(t).normal(target, pick(gen).reserve(blocks_for(t.numel())), mean, std);
  if (!target.same(t)) backend_of(t).copy(target, t);
  t.bump_version();
  return t;
}

Tensor rand(const Shape& shape, TensorOptions options, Generator* gen) {
  GRADUS_PROFILE_OP("rand");
  Tensor t = make(shape, options, "rand");
  uniform_(t, 0.0, 1.0, gen);
  return finish(t, options.requires_grad);
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* gen) {
  GRADUS_PROFILE_OP("randn");
  Tensor t = make(shape, options, "randn");
  normal_(t, 0.0, 1.0, gen);
  return finish(t, options.requires_grad);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options,
               Generator* gen) {
  GRADUS_PROFILE_OP("randint");
  GRADUS_CHECK(low < high, ValueError, "randint: low (", low, ") must be less than high (", high,
               ")");
  Tensor t = empty(shape, {options.dtype, options.device});
  if (t.numel() > 0) {
    // Ranges wider than 2^32 take two Philox words per value (see the CPU kernel).
    const bool wide = static_cast<uint64_t>(high - low) > (uint64_t{1} << 32);
    const uint64_t blocks = blocks_for(wide ? 2 * t.numel() : t.numel());
    backend_of(t).uniform(t, pick(gen).reserve(blocks), static_cast<double>(low),
                          static_cast<double>(high));
  }
  return t;
}

Tensor bernoulli(const Tensor& p, Generator* gen) {
  GRADUS_PROFILE_OP("bernoulli");
  ops::check_defined("bernoulli", {&p});
  ops::check_floating("bernoulli", p, "probability tensor");
  Tensor out = empty(p.sizes(), p.options());
  if (out.numel() > 0) {
    backend_of(p).bernoulli(out, p, pick(gen).reserve(blocks_for(out.numel())));
  }
  return out;
}

Tensor bernoulli(const Shape& shape, double p, TensorOptions options, Generator* gen) {
  GRADUS_PROFILE_OP("bernoulli");
  GRADUS_CHECK(p >= 0 && p <= 1, ValueError, "bernoulli: p must be in [0, 1], got ", p);
  Tensor prob =
      full({}, p, {is_floating(options.dtype) ? options.dtype : DType::f32, options.device});
  Tensor out = empty(shape, {options.dtype, options.device});
  if (out.numel() > 0) {
    backend_of(out).bernoulli(out, ops::broadcast_raw(prob, shape),
                              pick(gen).reserve(blocks_for(out.numel())));
  }
  return out;
}

Tensor randperm(int64_t n, TensorOptions options, Generator* gen) {
  GRADUS_PROFILE_OP("randperm");
  GRADUS_CHECK(n >= 0, ValueError, "randperm: n must be non-negative, got ", n);
  // Fisher-Yates on the host driven by Philox words, so the permutation depends only on the
  // generator state (identical whatever device the result goes to).
  std::vector<int64_t> perm(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
  if (n > 1) {
    const PhiloxState s = pick(gen).reserve(blocks_for(2 * n));
    for (int64_t i = n - 1; i > 0; --i) {
      // Two 32-bit words -> a 64-bit draw; modulo bias is below 2^-32 for any realistic n.
      const int64_t k = 2 * (n - 1 - i);
      const auto b0 = philox4x32(s.offset + static_cast<uint64_t>(k / 4), s.seed);
      const auto b1 = philox4x32(s.offset + static_cast<uint64_t>((k + 1) / 4), s.seed);
      const uint64_t r = (static_cast<uint64_t>(b0[k % 4]) << 32) | b1[(k + 1) % 4];
      std::swap(perm[static_cast<size_t>(i)],
                perm[static_cast<size_t>(r % static_cast<uint64_t>(i + 1))]);
    }
  }
  return from_vector(perm, {n}, options);
}

Tensor rand_like(const Tensor& t, Generator* gen) {
  return rand(t.sizes(), t.options(), gen);
}
Tensor randn_like(const Tensor& t, Generator* gen) {
  return randn(t.sizes(), t.options(), gen);
}

}  // namespace gradus
