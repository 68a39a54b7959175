// bf16 and float32 GEMMs on oneDNN's matmul (onednn_gemm.h). For bf16, chosen over OpenBLAS's
// sbgemm by measurement and availability (docs/performance.md, "bf16 on the CPU"): Debian's
// OpenBLAS is built without it, and OPENBLAS_CORETYPE=Haswell would keep it off AVX512-BF16
// anyway. For float32 on AVX-512, by measurement (docs/performance.md, "float32 on an AVX-512
// CPU"): OpenBLAS's AVX2 kernels reach half of oneDNN's rate there.
//
// Each call describes op(a), op(b) and out to oneDNN as strided [batch, rows, cols] tensors, so a
// transposed or column-major operand needs no copy; a batch of one broadcasts. Primitives are
// cached by everything that shapes them (sizes, strides, epilogue, thread count).
#include "backend/cpu/onednn_gemm.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/common/layout.h"
#include "backend/cpu/cpu_backend.h"

#if GRADUS_HAS_ONEDNN
#include "backend/cpu/onednn_util.h"
#endif

namespace gradus::backend::cpu {

#if GRADUS_HAS_ONEDNN
namespace {

using common::BlasMatrix;
using common::matrix_view;
using common::MatrixView;

// True when oneDNN may use `level` on this CPU (and ONEDNN_MAX_CPU_ISA does not cap it below).
// oneDNN's ISA values are bit sets, each level containing the ones below it.
bool effective_isa_has(dnnl::cpu_isa level) {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bits = static_cast<unsigned>(level);
  return (isa & bits) == bits;
}

const char* isa_name() {
  return effective_isa_has(dnnl::cpu_isa::avx512_core_amx) ? "AMX" : "AVX512-BF16";
}

// One operand as oneDNN sees it: op(t) as [batch, rows, cols] with strides (batch 1 broadcasts).
struct Operand {
  std::array<int64_t, 3> dims, strides;
};

Operand describe(const MatrixView& v, const BlasMatrix& m, bool transpose) {
  int64_t rows = v.rows, cols = v.cols;
  int64_t rs = m.transposed ? 1 : m.ld, cs = m.transposed ? m.ld : 1;
  if (transpose) {
    std::swap(rows, cols);
    std::swap(rs, cs);
  }
  const int64_t batch = v.bs == 0 ? 1 : v.batch;
  const int64_t bs = batch == 1 ? std::max(rows * rs, cols * cs) : v.bs;
  return {{batch, rows, cols}, {bs, rs, cs}};
}

dnnl::memory::desc desc_of(const Operand& o, dnnl::memory::data_type type) {
  return dnnl::memory::desc({o.dims.begin(), o.dims.end()}, type,
                            {o.strides.begin(), o.strides.end()});
}

struct CachedPrimitive {
  bool fast = false;  // oneDNN chose an optimised kernel (not its reference loops)
  dnnl::matmul matmul;
  dnnl::memory::desc scratch;  // its scratchpad, which the caller allocates
};

onednn::PrimitiveCache<CachedPrimitive> g_cache;

int64_t float_bits(double v) {
  const auto f = static_cast<float>(v);
  int32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

dnnl::algorithm eltwise_of(Activation act) {
  switch (act) {
    case Activation::relu:
      return dnnl::algorithm::eltwise_relu;
    case Activation::gelu:
      return dnnl::algorithm::eltwise_gelu_erf;
    default:
      return dnnl::algorithm::eltwise_gelu_tanh;
  }
}

CachedPrimitive create(dnnl::memory::data_type type, const Operand& sa, const Operand& sb,
                       const Operand& so, const Operand* bias, const GemmArgs& args) {
  dnnl::primitive_attr attr = onednn::user_scratchpad();
  if (args.alpha != 1.0) attr.set_output_scales(0, {static_cast<float>(args.alpha)});
  dnnl::post_ops post;
  if (args.beta != 0.0) post.append_sum(static_cast<float>(args.beta));
  if (args.activation != Activation::none) {
    post.append_eltwise(1.0F, eltwise_of(args.activation), 0.0F, 0.0F);
  }
  attr.set_post_ops(post);
  const dnnl::memory::desc bias_md = bias ? desc_of(*bias, type) : dnnl::memory::desc();
  try {
    const dnnl::matmul::primitive_desc pd(
        dnnl::matmul::desc(desc_of(sa, type), desc_of(sb, type), bias_md, desc_of(so, type)), attr,
        onednn::engine());
    if (!onednn::is_fast(pd)) return {};
    return {true, dnnl::matmul(pd), pd.scratchpad_desc()};
  } catch (const dnnl::error&) {
    return {};  // a case this oneDNN does not implement
  }
}

}  // namespace

// bf16 dot products in hardware: AVX512-BF16 (Cooper Lake, Zen 4) or AMX (Sapphire Rapids on).
bool native_bf16_gemm() {
  static const bool native = effective_isa_has(dnnl::cpu_isa::avx512_core_bf16);
  return native;
}

// oneDNN's AVX-512 float32 kernels (brgemm needs avx512_core: Skylake-X, Zen 4 and later).
bool onednn_f32_gemm() {
  static const bool onednn = effective_isa_has(dnnl::cpu_isa::avx512_core);
  return onednn;
}

namespace {

std::string onednn_version() {
  const dnnl::version_t* v = dnnl::version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch);
}

}  // namespace

std::string half_gemm_description() {
  if (native_bf16_gemm())
    return std::string("bf16 on ") + isa_name() + " (" + onednn_version() + ")";
  return "bf16 converted to float32 (no bf16 instructions seen by " + onednn_version() +
         "); f16 converted to float32";
}

std::string f32_gemm_description() {
  if (onednn_f32_gemm()) {
    return "AVX-512 (" + onednn_version() + "); OpenBLAS below " +
           std::to_string(onednn_f32_min_work()) + " multiply-adds";
  }
  return "OpenBLAS (no AVX-512 seen by " + onednn_version() + ")";
}

bool onednn_gemm(Backend& be, const Tensor& a, const Tensor& b, const Tensor& out,
                 const GemmArgs& args) {
  const DType dt = out.dtype();
  const bool on = dt == DType::bf16 ? native_bf16_gemm() : dt == DType::f32 && onednn_f32_gemm();
  if (!on || a.dtype() != dt || b.dtype() != dt) return false;
  if (args.bias != nullptr && (args.bias->dtype() != dt || args.alpha != 1.0)) {
    return false;  // oneDNN would add the bias before scaling by alpha; rare enough to convert
  }
  const dnnl::memory::data_type type =
      dt == DType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  // An operand as a BLAS-readable matrix: itself, or a contiguous copy when no stride is 1.
  const auto readable = [&](const Tensor& t, BlasMatrix& m) {
    if (common::blas_matrix(matrix_view(t), m)) return t;
    Tensor c = contiguous_copy(be, t, dt);
    common::blas_matrix(matrix_view(c), m);
    return c;
  };
  BlasMatrix ma, mb, mo;
  const Tensor ta = readable(a, ma), tb = readable(b, mb);
  // The output row-major (oneDNN's fast kernels write rows); anything else goes through a copy.
  const MatrixView vo0 = matrix_view(out);
  const bool out_ok = common::blas_matrix(vo0, mo) && !(mo.transposed && vo0.rows > 1);
  Tensor to = out;
  if (!out_ok) {
    to = empty(out.sizes(), {dt, out.device(), false});
    if (args.beta != 0.0) be.copy(out, to);
    common::blas_matrix(matrix_view(to), mo);
  }
  const MatrixView vo = matrix_view(to);
  const Operand sa = describe(matrix_view(ta), ma, args.trans_a);
  const Operand sb = describe(matrix_view(tb), mb, args.trans_b);
  if (sa.dims[2] == 0) return false;  // k = 0: out = beta * out, which the float32 path does
  const Operand so = describe(vo, mo, false);
  // The bias contiguous: oneDNN's fast kernels read it densely whatever its strides say.
  const Tensor bias_tensor = args.bias == nullptr || args.bias->stride(0) == 1
                                 ? Tensor()
                                 : contiguous_copy(be, *args.bias, dt);
  const Tensor* bias_data = bias_tensor.defined() ? &bias_tensor : args.bias;
  Operand bias{};
  if (args.bias != nullptr) bias = {{1, 1, so.dims[2]}, {so.dims[2], so.dims[2], 1}};
  std::vector<int64_t> key;
  key.reserve(32);
  for (const Operand* o : std::array<const Operand*, 4>{&sa, &sb, &so, &bias}) {
    key.insert(key.end(), o->dims.begin(), o->dims.end());
    key.insert(key.end(), o->strides.begin(), o->strides.end());
  }
  key.insert(key.end(),
             {static_cast<int64_t>(dt), args.bias != nullptr, float_bits(args.alpha),
              float_bits(args.beta), static_cast<int64_t>(args.activation), onednn::threads()});
  const CachedPrimitive primitive =
      g_cache.get(key, [&] { return create(type, sa, sb, so, args.bias ? &bias : nullptr, args); });
  if (!primitive.fast) return false;
  dnnl::engine& engine = onednn::engine();
  dnnl::stream stream(engine);
  const auto memory = [&](const Operand& o, const Tensor& t) {
    return dnnl::memory(desc_of(o, type), engine, const_cast<void*>(t.raw_data()));
  };
  std::unordered_map<int, dnnl::memory> io{{DNNL_ARG_SRC, memory(sa, ta)},
                                           {DNNL_ARG_WEIGHTS, memory(sb, tb)},
                                           {DNNL_ARG_DST, memory(so, to)}};
  if (bias_data != nullptr) io.emplace(DNNL_ARG_BIAS, memory(bias, *bias_data));
  const Tensor scratch =
      empty({static_cast<int64_t>(primitive.scratch.get_size())}, {DType::u8, out.device(), false});
  io.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(primitive.scratch, engine, scratch.raw_data()));
  try {
    primitive.matmul.execute(stream, io);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("gemm: oneDNN's ") + dtype_name(dt) + " matmul failed: " + e.what());
  }
  if (to.raw_data() != out.raw_data()) be.copy(to, out);
  return true;
}

#else  // built without oneDNN

bool native_bf16_gemm() {
  return false;
}

bool onednn_f32_gemm() {
  return false;
}

std::string half_gemm_description() {
  return "bf16 and f16 converted to float32 (gradus built without oneDNN)";
}

std::string f32_gemm_description() {
  return "OpenBLAS (gradus built without oneDNN)";
}

bool onednn_gemm(Backend&, const Tensor&, const Tensor&, const Tensor&, const GemmArgs&) {
  return false;
}

#endif

}  // namespace gradus::backend::cpu
