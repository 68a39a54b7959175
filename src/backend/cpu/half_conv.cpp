// bf16 convolutions on oneDNN (half_conv.h). Each primitive is created for oneDNN's preferred
// (blocked) layouts, format_tag::any, and the NCHW / OIHW tensors gradus stores are reordered into
// and out of them around the call: oneDNN's fast bf16 convolutions read blocked layouts only, and
// a reorder costs a pass over the tensor against the convolution's many. Primitives are cached by
// geometry, direction and thread count (onednn_util.h), as the GEMM's are.
#include "backend/cpu/half_conv.h"

#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn_gemm.h"

#if GRADUS_HAS_ONEDNN
#include "backend/cpu/onednn_util.h"
#endif

namespace gradus::backend::cpu {

#if GRADUS_HAS_ONEDNN
namespace {

using dnnl::memory;

enum class Direction : int64_t { forward, backward_data, backward_weight };

// The convolution's geometry in oneDNN's terms (dilation counts the gaps: gradus's minus one).
struct Geometry {
  memory::dims src, weights, dst, bias, strides, dilates, padding;
  std::vector<int64_t> key(Direction d, bool with_bias) const {
    std::vector<int64_t> k{static_cast<int64_t>(d), with_bias, onednn::threads()};
    for (const memory::dims* v : {&src, &weights, &dst, &strides, &dilates, &padding}) {
      k.insert(k.end(), v->begin(), v->end());
      k.push_back(-1);
    }
    return k;
  }
};

Geometry geometry(const Tensor& x, const Tensor& w, const Tensor& out, const Conv2dArgs& a) {
  const int64_t g = a.groups, o = w.size(0);
  Geometry geo;
  geo.src = {x.size(0), x.size(1), x.size(2), x.size(3)};
  geo.weights = g == 1 ? memory::dims{o, w.size(1), w.size(2), w.size(3)}
                       : memory::dims{g, o / g, w.size(1), w.size(2), w.size(3)};
  geo.dst = {out.size(0), out.size(1), out.size(2), out.size(3)};
  geo.bias = {o};
  geo.strides = {a.stride_h, a.stride_w};
  geo.dilates = {a.dilation_h - 1, a.dilation_w - 1};
  geo.padding = {a.pad_h, a.pad_w};  // the same on both sides, as PyTorch pads
  return geo;
}

memory::desc any(const memory::dims& dims) {
  return {dims, memory::data_type::bf16, memory::format_tag::any};
}

// What gradus stores: contiguous NCHW, OIHW (GOIHW with groups), a vector bias.
memory::desc plain(const memory::dims& dims) {
  const memory::format_tag tag = dims.size() == 1   ? memory::format_tag::a
                                 : dims.size() == 4 ? memory::format_tag::abcd
                                                    : memory::format_tag::abcde;
  return {dims, memory::data_type::bf16, tag};
}

dnnl::convolution_forward::primitive_desc forward_pd(const Geometry& g, bool with_bias) {
  using F = dnnl::convolution_forward;
  const auto prop = dnnl::prop_kind::forward_training;
  const auto alg = dnnl::algorithm::convolution_direct;
  const F::desc d = with_bias ? F::desc(prop, alg, any(g.src), any(g.weights), plain(g.bias),
                                        any(g.dst), g.strides, g.dilates, g.padding, g.padding)
                              : F::desc(prop, alg, any(g.src), any(g.weights), any(g.dst),
                                        g.strides, g.dilates, g.padding, g.padding);
  return {d, onednn::user_scratchpad(), onednn::engine()};
}

// A primitive and the layouts it reads and writes, indexed by DNNL_ARG_*.
struct Cached {
  bool fast = false;
  dnnl::primitive primitive;
  std::unordered_map<int, memory::desc> layouts;  // DNNL_ARG_SCRATCHPAD's too
};

Cached create(Direction dir, const Geometry& g, bool with_bias) {
  try {
    const auto fwd = forward_pd(g, with_bias);
    const auto alg = dnnl::algorithm::convolution_direct;
    if (dir == Direction::forward) {
      if (!onednn::is_fast(fwd)) return {};
      Cached c{true,
               dnnl::convolution_forward(fwd),
               {{DNNL_ARG_SRC, fwd.src_desc()},
                {DNNL_ARG_WEIGHTS, fwd.weights_desc()},
                {DNNL_ARG_DST, fwd.dst_desc()}}};
      if (with_bias) c.layouts[DNNL_ARG_BIAS] = fwd.bias_desc();
      c.layouts[DNNL_ARG_SCRATCHPAD] = fwd.scratchpad_desc();
      return c;
    }
    if (dir == Direction::backward_data) {
      using B = dnnl::convolution_backward_data;
      const B::primitive_desc pd(B::desc(alg, any(g.src), any(g.weights), any(g.dst), g.strides,
                                         g.dilates, g.padding, g.padding),
                                 onednn::user_scratchpad(), onednn::engine(), fwd);
      if (!onednn::is_fast(pd)) return {};
      return {true,
              B(pd),
              {{DNNL_ARG_DIFF_SRC, pd.diff_src_desc()},
               {DNNL_ARG_WEIGHTS, pd.weights_desc()},
               {DNNL_ARG_DIFF_DST, pd.diff_dst_desc()},
               {DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc()}}};
    }
    using W = dnnl::convolution_backward_weights;
    const W::desc d = with_bias ? W::desc(alg, any(g.src), any(g.weights), plain(g.bias),
                                          any(g.dst), g.strides, g.dilates, g.padding, g.padding)
                                : W::desc(alg, any(g.src), any(g.weights), any(g.dst), g.strides,
                                          g.dilates, g.padding, g.padding);
    const W::primitive_desc pd(d, onednn::user_scratchpad(), onednn::engine(), fwd);
    if (!onednn::is_fast(pd)) return {};
    Cached c{true,
             W(pd),
             {{DNNL_ARG_SRC, pd.src_desc()},
              {DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc()},
              {DNNL_ARG_DIFF_DST, pd.diff_dst_desc()},
              {DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc()}}};
    if (with_bias) c.layouts[DNNL_ARG_DIFF_BIAS] = pd.diff_bias_desc();
    return c;
  } catch (const dnnl::error&) {
    return {};  // a case this oneDNN does not implement
  }
}

onednn::PrimitiveCache<Cached> g_cache;

// One argument of a call: the tensor gradus holds, and whether the primitive writes it.
struct Arg {
  int id;
  const Tensor* tensor;
  const memory::dims* dims;
  bool output;
};

// Runs the (cached) primitive for dir on args, reordering each tensor from and to its plain
// layout where the primitive's differs. False when oneDNN has no fast kernel for the case.
bool run(Backend& be, Direction dir, const Geometry& g, bool with_bias,
         const std::vector<Arg>& args) {
  for (const Arg& a : args) {
    if (a.tensor->dtype() != DType::bf16) return false;
    if (a.output && !a.tensor->is_contiguous()) return false;
  }
  const Cached c = g_cache.get(g.key(dir, with_bias), [&] { return create(dir, g, with_bias); });
  if (!c.fast) return false;
  dnnl::engine& engine = onednn::engine();
  dnnl::stream stream(engine);
  std::unordered_map<int, memory> io;
  std::vector<std::pair<memory, memory>> write_back;  // (primitive's layout, gradus's tensor)
  std::vector<Tensor> keep;  // contiguous copies of strided inputs, blocked copies, scratch
  keep.reserve(2 * args.size() + 1);  // (pointers into it are taken)
  // Memory in one of oneDNN's layouts, allocated by gradus (so --memory-limit covers it).
  const auto allocate = [&](const memory::desc& layout) {
    keep.push_back(
        empty({static_cast<int64_t>(layout.get_size())}, {DType::u8, Device::cpu(), false}));
    return memory(layout, engine, keep.back().raw_data());
  };
  io.emplace(DNNL_ARG_SCRATCHPAD, allocate(c.layouts.at(DNNL_ARG_SCRATCHPAD)));
  for (const Arg& a : args) {
    const Tensor* t = a.tensor;
    if (!a.output && !t->is_contiguous()) {
      keep.push_back(contiguous_copy(be, *t, DType::bf16));
      t = &keep.back();
    }
    memory user(plain(*a.dims), engine, const_cast<void*>(t->raw_data()));
    const memory::desc& layout = c.layouts.at(a.id);
    if (layout == user.get_desc()) {
      io.emplace(a.id, user);
      continue;
    }
    memory blocked = allocate(layout);
    if (a.output) {
      write_back.emplace_back(blocked, user);
    } else {
      dnnl::reorder(user, blocked).execute(stream, user, blocked);
    }
    io.emplace(a.id, blocked);
  }
  try {
    c.primitive.execute(stream, io);
    for (auto& [blocked, user] : write_back) {
      dnnl::reorder(blocked, user).execute(stream, blocked, user);
    }
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("conv2d: oneDNN's bf16 convolution failed: ") + e.what());
  }
  return true;
}

}  // namespace

bool native_bf16_conv2d(Backend& be, const Tensor& x, const Tensor& w, const Tensor& bias,
                        const Tensor& out, const Conv2dArgs& args) {
  if (!native_bf16_gemm() || out.numel() == 0 || x.numel() == 0) return false;
  const Geometry g = geometry(x, w, out, args);
  std::vector<Arg> io{{DNNL_ARG_SRC, &x, &g.src, false},
                      {DNNL_ARG_WEIGHTS, &w, &g.weights, false},
                      {DNNL_ARG_DST, &out, &g.dst, true}};
  if (bias.defined()) io.push_back({DNNL_ARG_BIAS, &bias, &g.bias, false});
  return run(be, Direction::forward, g, bias.defined(), io);
}

bool native_bf16_conv2d_backward_data(Backend& be, const Tensor& grad_out, const Tensor& w,
                                      const Tensor& grad_x, const Conv2dArgs& args) {
  if (!native_bf16_gemm() || grad_out.numel() == 0 || grad_x.numel() == 0) return false;
  const Geometry g = geometry(grad_x, w, grad_out, args);
  return run(be, Direction::backward_data, g, false,
             {{DNNL_ARG_DIFF_DST, &grad_out, &g.dst, false},
              {DNNL_ARG_WEIGHTS, &w, &g.weights, false},
              {DNNL_ARG_DIFF_SRC, &grad_x, &g.src, true}});
}

bool native_bf16_conv2d_backward_weight(Backend& be, const Tensor& grad_out, const Tensor& x,
                                        const Tensor& grad_w, const Tensor& grad_bias,
                                        const Conv2dArgs& args) {
  if (!native_bf16_gemm() || grad_out.numel() == 0 || x.numel() == 0 || grad_w.numel() == 0) {
    return false;
  }
  const Geometry g = geometry(x, grad_w, grad_out, args);
  std::vector<Arg> io{{DNNL_ARG_DIFF_DST, &grad_out, &g.dst, false},
                      {DNNL_ARG_SRC, &x, &g.src, false},
                      {DNNL_ARG_DIFF_WEIGHTS, &grad_w, &g.weights, true}};
  if (grad_bias.defined()) io.push_back({DNNL_ARG_DIFF_BIAS, &grad_bias, &g.bias, true});
  return run(be, Direction::backward_weight, g, grad_bias.defined(), io);
}

#else  // built without oneDNN

bool native_bf16_conv2d(Backend&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Conv2dArgs&) {
  return false;
}
bool native_bf16_conv2d_backward_data(Backend&, const Tensor&, const Tensor&, const Tensor&,
                                      const Conv2dArgs&) {
  return false;
}
bool native_bf16_conv2d_backward_weight(Backend&, const Tensor&, const Tensor&, const Tensor&,
                                        const Tensor&, const Conv2dArgs&) {
  return false;
}

#endif

}  // namespace gradus::backend::cpu
