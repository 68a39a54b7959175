// The CUDA backend: cuBLASLt for GEMM, cuDNN for convolution, own kernels for everything else.
// Host code (.cpp: argument preparation, library calls) is compiled with the project's warnings;
// kernels live in one .cu per family behind the plain launchers of kernels.h.
#pragma once

#include "backend/backend.h"

namespace gradus::backend::cuda {

class CudaBackend final : public Backend {
 public:
  DeviceType device_type() const override { return DeviceType::CUDA; }
  const char* name() const override { return "cuda"; }

  // elementwise.cpp (copy, fill, arange); runtime.cpp (host transfers, synchronize)
  void copy(const Tensor& src, const Tensor& dst) override;
  void copy_from_host(const void* host, const Tensor& dst_contiguous) override;
  void copy_to_host(const Tensor& src_contiguous, void* host) override;
  void copy_between_devices(const Tensor& src_contiguous, const Tensor& dst_contiguous) override;
  void fill(const Tensor& dst, double value) override;
  void arange(const Tensor& dst, double start, double step) override;
  void synchronize() override;

  // elementwise.cpp
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double a, double b) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
              double alpha) override;
  void ternary(TernaryOp op, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& out,
               double alpha) override;

  // elementwise.cpp
  void reduce(ReduceOp op, const Tensor& x, const Tensor& out,
              const std::vector<int64_t>& dims) override;

  // gemm.cpp (cuBLASLt)
  void gemm(const Tensor& a, const Tensor& b, const Tensor& out, const GemmArgs& args) override;

  // nn.cpp (softmax, cross-entropy, norms, pooling)
  void softmax(const Tensor& x, const Tensor& out, bool log) override;
  void softmax_backward(const Tensor& grad_out, const Tensor& y, const Tensor& grad_in,
                        bool log) override;
  void cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight,
                     int64_t ignore_index, double label_smoothing, const Tensor& loss,
                     const Tensor& lse) override;
  void cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& target,
                              const Tensor& weight, int64_t ignore_index, double label_smoothing,
                              const Tensor& lse, const Tensor& grad_logits) override;
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
  // conv.cpp (cuDNN)
  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out,
              const Conv2dArgs& args) override;
  void conv2d_backward_data(const Tensor& grad_out, const Tensor& w, const Tensor& grad_x,
                            const Conv2dArgs& args) override;
  void conv2d_backward_weight(const Tensor& grad_out, const Tensor& x, const Tensor& grad_w,
                              const Tensor& grad_bias, const Conv2dArgs& args) override;
  void max_pool2d(const Tensor& x, const Tensor& out, const Tensor& indices,
                  const Pool2dArgs& args) override;
  void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices,
                           const Tensor& grad_x) override;
  void avg_pool2d(const Tensor& x, const Tensor& out, const Pool2dArgs& args) override;
  void avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x,
                           const Pool2dArgs& args) override;
  void adaptive_avg_pool2d(const Tensor& x, const Tensor& out) override;
  void adaptive_avg_pool2d_backward(const Tensor& grad_out, const Tensor& grad_x) override;

  // misc.cpp (indexing, random, optimizers)
  void check_index_range(const Tensor& index, const IndexCheck& check) override;
  void index_select_rows(const Tensor& table, const Tensor& index, const Tensor& out) override;
  void index_add_rows(const Tensor& grad_out, const Tensor& index,
                      const Tensor& grad_table) override;
  void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override;
  void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) override;

  void uniform(const Tensor& out, PhiloxState state, double lo, double hi) override;
  void normal(const Tensor& out, PhiloxState state, double mean, double std) override;
  void bernoulli(const Tensor& out, const Tensor& p, PhiloxState state) override;
  void dropout(const Tensor& x, double p, PhiloxState state, const Tensor& out,
               const Tensor& mask) override;

  void sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const SgdArgs& args) override;
  void adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                 const std::vector<Tensor>& max_exp_avg_sq, const AdamArgs& args) override;
  // swiglu.cu
  void swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                       const Tensor& grad_gate, const Tensor& grad_up) override;
  // attention.cu
  void rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse,
                        const Tensor& out) override;
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, const AttentionArgs& args) override;
  void attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& grad_q,
                          const Tensor& grad_k, const Tensor& grad_v,
                          const AttentionArgs& args) override;
  void unscale_and_check(const std::vector<Tensor>& tensors, double scale,
                         const Tensor& found_inf) override;
  // augment.cpp / augment.cu
  void augment_images(const Tensor& x, const Tensor& out, const ImageAugmentArgs& args) override;
};

}  // namespace gradus::backend::cuda
