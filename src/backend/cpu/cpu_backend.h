// The CPU backend: OpenBLAS for GEMM, OpenMP-parallel vectorisable loops for everything else.
// Kernels are grouped by family, one .cpp each (elementwise.cpp, reduce.cpp, gemm.cpp, ...).
#pragma once

#include <string>

#include "backend/backend.h"

namespace gradus::backend::cpu {

// Picks OpenBLAS's kernels for this CPU when its own detection fell back to a generic core
// (blas_config.cpp). Called once, when the CPU backend is first created.
void configure_blas();
// Under an address-space limit, has OpenBLAS map now the buffers of `callers` concurrent calls
// (it keeps them for reuse), so that no later call waits forever for a mapping (see
// blas_address_space.h). Without a limit it does nothing.
void reserve_blas_buffers(int callers);
// How many callers' buffers reserve_blas_buffers has had mapped so far.
int reserved_blas_buffers();
std::string blas_core_name();
// A contiguous copy of t in dtype, made with be.copy (gemm.cpp).
Tensor contiguous_copy(Backend& be, const Tensor& t, DType dtype);

class CpuBackend final : public Backend {
 public:
  DeviceType device_type() const override { return DeviceType::CPU; }
  const char* name() const override { return "cpu"; }

  // copy.cpp
  void copy(const Tensor& src, const Tensor& dst) override;
  void copy_from_host(const void* host, const Tensor& dst_contiguous) override;
  void copy_to_host(const Tensor& src_contiguous, void* host) override;
  void fill(const Tensor& dst, double value) override;
  void arange(const Tensor& dst, double start, double step) override;
  void synchronize() override {}

  // elementwise.cpp
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
              double alpha) override;
  void ternary(TernaryOp op, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& out,
               double alpha) override;

  // reduce.cpp
  void reduce(ReduceOp op, const Tensor& x, const Tensor& out,
              const std::vector<int64_t>& dims) override;

  // gemm.cpp
  void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args) override;

  // softmax.cpp
  void softmax(const Tensor& x, const Tensor& out, bool log) override;
  void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in,
                        bool log) override;
  // cross_entropy.cpp
  void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                     int64_t ignore_index, double label_smoothing, const Tensor& loss,
                     const Tensor& lse) override;
  void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target,
                              const Tensor& weight, int64_t ignore_index, double label_smoothing,
                              const Tensor& lse, const Tensor& grad_logits) override;
  // norm.cpp
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  const Tensor& out, const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, const Tensor& grad_x,
                           const Tensor& grad_weight, const Tensor& grad_bias) override;
  void batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, bool training,
                  double momentum, double eps, const Tensor& out, const Tensor& save_mean,
                  const Tensor& save_rstd) override;
  void batch_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight,
                           const Tensor& save_mean, const Tensor& save_rstd, const Tensor& grad_x,
                           const Tensor& grad_weight, const Tensor& grad_bias) override;
  // conv.cpp
  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out,
              const Conv2dArgs& args) override;
  void conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Tensor& grad_x,
                            const Conv2dArgs& args) override;
  void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_w,
                              const Tensor& grad_bias, const Conv2dArgs& args) override;
  // pool.cpp
  void max_pool2d(const Tensor& x, const Tensor& out, const Tensor& indices,
                  const Pool2dArgs& args) override;
  void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices,
                           const Tensor& grad_x) override;
  void avg_pool2d(const Tensor& x, const Tensor& out, const Pool2dArgs& args) override;
  void avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x,
                           const Pool2dArgs& args) override;
  void adaptive_avg_pool2d(const Tensor& x, const Tensor& out) override;
  void adaptive_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x) override;

  // indexing.cpp
  void check_index_range(const Tensor& index, const IndexCheck& check) override;
  void index_select_rows(const Tensor& table, const Tensor& index, const Tensor& out) override;
  void index_add_rows(const Tensor& grad_out, const Tensor& index,
                      const Tensor& grad_table) override;
  void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override;
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override;

  // random.cpp
  void uniform(const Tensor& out, PhiloxState state, double lo, double hi) override;
  void normal(const Tensor& out, PhiloxState state, double mean, double std) override;
  void bernoulli(const Tensor& out, const Tensor& p, PhiloxState state) override;
  void dropout(const Tensor& x, double p, PhiloxState state, const Tensor& out,
               const Tensor& mask) override;

  // swiglu.cpp
  void swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                       const Tensor& grad_gate, const Tensor& grad_up) override;
  // attention.cpp
  void rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse,
                        const Tensor& out) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, const AttentionArgs& args) override;
  bool grouped_query_attention() const override { return true; }
  void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& grad_q,
                          const Tensor& grad_k, const Tensor& grad_v,
                          const AttentionArgs& args) override;

  // optimizer.cpp
  void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const SgdArgs& args) override;
  void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                 const std::vector<Tensor>& max_exp_avg_sq, const AdamArgs& args) override;
  void unscale_and_check(const std::vector<Tensor>& tensors, double scale,
                         const Tensor& found_inf) override;
  // augment.cpp
  void augment_images(const Tensor& x, const Tensor& out, const ImageAugmentArgs& args) override;
};

// u[k] = uint_to_unit_float(word(first + k)) of the Philox stream at `state` (random.cpp): the
// uniforms every random kernel draws, for kernels that need a stream slice of their own.
void unit_floats(PhiloxState state, int64_t first, int64_t n, float* u);

}  // namespace gradus::backend::cpu
