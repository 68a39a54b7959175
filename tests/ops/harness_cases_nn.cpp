// Harness table: softmax / log_softmax, losses (cross_entropy with label smoothing, ignore_index
// and class weights, nll_loss, mse_loss, binary_cross_entropy_with_logits), conv2d, pooling,
// batch_norm (train and eval), layer_norm, rms_norm, rotary_embedding, dropout (deterministic
// settings; the training statistics have their own test in harness_test.cpp).
#include "ops/harness.h"

namespace gradus::harness {
namespace {

using L = Layout;

Conv2dOptions conv_opts(std::vector<int64_t> stride, std::vector<int64_t> padding,
                        std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1) {
  Conv2dOptions o;
  o.stride = std::move(stride);
  o.padding = std::move(padding);
  o.dilation = std::move(dilation);
  o.groups = groups;
  return o;
}

Pool2dOptions pool_opts(std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                        std::vector<int64_t> padding = {0, 0}, bool ceil_mode = false,
                        bool count_include_pad = true, std::vector<int64_t> dilation = {1, 1}) {
  Pool2dOptions o;
  o.kernel_size = std::move(kernel);
  o.stride = std::move(stride);
  o.padding = std::move(padding);
  o.ceil_mode = ceil_mode;
  o.count_include_pad = count_include_pad;
  o.dilation = std::move(dilation);
  return o;
}

CrossEntropyOptions ce_opts(Reduction r = Reduction::mean, double smoothing = 0.0,
                            int64_t ignore = -100) {
  CrossEntropyOptions o;
  o.reduction = r;
  o.label_smoothing = smoothing;
  o.ignore_index = ignore;
  return o;
}

}  // namespace

std::vector<OpCase> nn_cases() {
  std::vector<OpCase> c;
  // -------------------------------------------------------------------------------- softmax
  for (bool log : {false, true}) {
    const std::string n = log ? "log_softmax" : "softmax";
    auto sm = [log](const Tensor& x, int64_t dim) {
      return log ? log_softmax(x, dim) : softmax(x, dim);
    };
    c.push_back(
        op(n + "_last", {range({4, 7}, -3, 3)}, [sm](const Inputs& x) { return sm(x[0], -1); }));
    c.push_back(op(n + "_middle", {range({2, 5, 3}, -3, 3)},
                   [sm](const Inputs& x) { return sm(x[0], 1); }));
    c.push_back(op(n + "_first", {range({5, 3}, -3, 3, L::transposed)},
                   [sm](const Inputs& x) { return sm(x[0], 0); }));
    c.push_back(op(n + "_strided", {range({3, 6}, -3, 3, L::strided)},
                   [sm](const Inputs& x) { return sm(x[0], -1); }));
    c.push_back(op(n + "_wide_row", {range({2, 130}, -5, 5)},
                   [sm](const Inputs& x) { return sm(x[0], 1); }));
    // Large logits: the kernel must subtract the row maximum.
    c.push_back(op(
        n + "_large_logits", {range({3, 5}, 80, 90)}, [sm](const Inputs& x) { return sm(x[0], 1); },
        kFull));
    c.push_back(
        op(n + "_empty", {range({0, 5}, -3, 3)}, [sm](const Inputs& x) { return sm(x[0], 1); }));
    c.push_back(
        op(n + "_size1", {range({4, 1}, -3, 3)}, [sm](const Inputs& x) { return sm(x[0], 1); }));
  }

  // ----------------------------------------------------------------------------------- losses
  auto ce = [](CrossEntropyOptions o) {
    return [o](const Inputs& x) {
      CrossEntropyOptions oo = o;
      if (x.size() > 2) oo.weight = x[2];
      return cross_entropy(x[0], x[1], oo);
    };
  };
  const In logits = range({8, 5}, -3, 3);
  const In target = idx({8}, 0, 5);
  const In weight = nograd(range({5}, 0.5, 1.5));
  c.push_back(op("cross_entropy", {logits, target}, ce(ce_opts())));
  c.push_back(op("cross_entropy_sum", {logits, target}, ce(ce_opts(Reduction::sum))));
  c.push_back(op("cross_entropy_none", {logits, target}, ce(ce_opts(Reduction::none))));
  c.push_back(op("cross_entropy_smoothing", {logits, target}, ce(ce_opts(Reduction::mean, 0.1))));
  c.push_back(
      op("cross_entropy_smoothing_none", {logits, target}, ce(ce_opts(Reduction::none, 0.3))));
  // Targets are in [0, 5), so ignore_index 0 drops about a fifth of the rows.
  c.push_back(op("cross_entropy_ignore", {logits, target}, ce(ce_opts(Reduction::mean, 0.0, 0))));
  c.push_back(
      op("cross_entropy_ignore_none", {logits, target}, ce(ce_opts(Reduction::none, 0.0, 0))));
  c.push_back(op("cross_entropy_weight", {logits, target, weight}, ce(ce_opts())));
  c.push_back(
      op("cross_entropy_weight_sum", {logits, target, weight}, ce(ce_opts(Reduction::sum))));
  c.push_back(op("cross_entropy_weight_smoothing", {logits, target, weight},
                 ce(ce_opts(Reduction::mean, 0.2))));
  c.push_back(op("cross_entropy_all_options", {logits, target, weight},
                 ce(ce_opts(Reduction::mean, 0.15, 2))));
  c.push_back(op("cross_entropy_noncontig", {range({8, 5}, -3, 3, L::transposed), target},
                 ce(ce_opts(Reduction::mean, 0.1))));
  // [N, C, d1, d2] logits with [N, d1, d2] targets (segmentation layout).
  c.push_back(op("cross_entropy_4d", {range({2, 4, 3, 3}, -3, 3), idx({2, 3, 3}, 0, 4)},
                 ce(ce_opts(Reduction::mean, 0.1))));
  c.push_back(op("cross_entropy_3d_none", {range({2, 4, 5}, -3, 3), idx({2, 5}, 0, 4)},
                 ce(ce_opts(Reduction::none))));
  // Logits far from 0: the loss lse - x[t] must not lose bits by rounding lse at |x|'s scale.
  // Loosened 8x: the CPU kernel saves lse = max + log(sum), rounded at the logits' scale (ulp
  // 7.6e-6 at 85), and its gradient exp(x - lse) inherits that error (up to ~4e-6 relative;
  // PyTorch keeps x - max and log(sum) apart). Tighten once the kernel does too.
  c.push_back(op("cross_entropy_large_logits", {range({4, 6}, 80, 90), idx({4}, 0, 6)},
                 ce(ce_opts(Reduction::none, 0.1)), kFull)
                  .tolerance(8));
  c.push_back(op("cross_entropy_wide", {range({3, 300}, -5, 5), idx({3}, 0, 300)},
                 ce(ce_opts(Reduction::mean, 0.05))));

  auto nll = [](CrossEntropyOptions o) {
    return [o](const Inputs& x) {
      CrossEntropyOptions oo = o;
      if (x.size() > 2) oo.weight = x[2];
      return nll_loss(x[0], x[1], oo);
    };
  };
  c.push_back(op("nll_loss", {logits, target}, nll(ce_opts())).sums_rounded_terms());
  c.push_back(
      op("nll_loss_weight_ignore", {logits, target, weight}, nll(ce_opts(Reduction::mean, 0.0, 3)))
          .sums_rounded_terms());
  c.push_back(op("nll_loss_none", {logits, target}, nll(ce_opts(Reduction::none))));
  c.push_back(op("nll_of_log_softmax", {logits, target},
                 [](const Inputs& x) { return nll_loss(log_softmax(x[0], 1), x[1]); }));

  for (auto [name, r] : {std::pair{"mean", Reduction::mean}, std::pair{"sum", Reduction::sum},
                         std::pair{"none", Reduction::none}}) {
    c.push_back(op(std::string("mse_loss_") + name, {f({3, 4}), f({3, 4}, L::transposed)},
                   [r](const Inputs& x) { return mse_loss(x[0], x[1], r); }));
    // Like PyTorch's, the loss (1 - t) x + log(1 + e^-x) is built from ops: in f16/bf16 each term
    // (up to |x| = 3) is rounded before they cancel.
    c.push_back(op(std::string("bce_with_logits_") + name,
                   {range({3, 4}, -3, 3), nograd(range({3, 4}, 0, 1))},
                   [r](const Inputs& x) { return binary_cross_entropy_with_logits(x[0], x[1], r); })
                    .sums_rounded_terms()
                    .tolerance(3));
  }
  c.push_back(op("bce_with_logits_pos_weight",
                 {range({3, 4}, -3, 3), nograd(range({3, 4}, 0, 1)), nograd(pos({4}))},
                 [](const Inputs& x) {
                   return binary_cross_entropy_with_logits(x[0], x[1], Reduction::mean, x[2]);
                 })
                  .sums_rounded_terms()
                  .tolerance(3));
  // Large |logits|: the log-sum-exp form must not overflow.
  c.push_back(op(
      "bce_with_logits_large", {range({2, 5}, -60, 60), nograd(range({2, 5}, 0, 1))},
      [](const Inputs& x) { return binary_cross_entropy_with_logits(x[0], x[1]); }, kFull));

  // ----------------------------------------------------------------------------------- conv2d
  auto conv = [](Conv2dOptions o) {
    return [o](const Inputs& x) { return conv2d(x[0], x[1], x.size() > 2 ? x[2] : Tensor(), o); };
  };
  c.push_back(op("conv2d", {f({2, 3, 6, 6}), f({4, 3, 3, 3}), f({4})}, conv({})));
  c.push_back(op("conv2d_no_bias", {f({2, 3, 5, 5}), f({4, 3, 3, 3})}, conv({})));
  c.push_back(op("conv2d_stride2_pad1", {f({2, 3, 7, 7}), f({4, 3, 3, 3}), f({4})},
                 conv(conv_opts({2, 2}, {1, 1}))));
  c.push_back(op("conv2d_dilation2", {f({1, 2, 7, 7}), f({3, 2, 3, 3}), f({3})},
                 conv(conv_opts({1, 1}, {2, 2}, {2, 2}))));
  c.push_back(op("conv2d_groups2", {f({2, 4, 5, 5}), f({6, 2, 3, 3}), f({6})},
                 conv(conv_opts({1, 1}, {1, 1}, {1, 1}, 2))));
  c.push_back(op("conv2d_depthwise", {f({2, 3, 5, 5}), f({3, 1, 3, 3}), f({3})},
                 conv(conv_opts({1, 1}, {1, 1}, {1, 1}, 3))));
  c.push_back(op("conv2d_1x1", {f({2, 5, 4, 4}), f({3, 5, 1, 1}), f({3})}, conv({})));
  c.push_back(op("conv2d_asymmetric", {f({2, 2, 7, 6}), f({3, 2, 3, 2}), f({3})},
                 conv(conv_opts({2, 1}, {1, 0}, {1, 2}))));
  c.push_back(op("conv2d_channels_last",
                 {f({2, 3, 5, 5}, L::channels_last), f({4, 3, 3, 3}), f({4})},
                 conv(conv_opts({1, 1}, {1, 1}))));
  c.push_back(op("conv2d_strided_input",
                 {f({1, 2, 5, 4}, L::strided), f({2, 2, 2, 2}, L::transposed)}, conv({})));
  c.push_back(
      op("conv2d_kernel_covers_input", {f({2, 2, 3, 3}), f({3, 2, 3, 3}), f({3})}, conv({})));

  // ---------------------------------------------------------------------------------- pooling
  auto maxp = [](Pool2dOptions o) { return [o](const Inputs& x) { return max_pool2d(x[0], o); }; };
  auto avgp = [](Pool2dOptions o) { return [o](const Inputs& x) { return avg_pool2d(x[0], o); }; };
  c.push_back(op("max_pool2d", {f({2, 3, 6, 6})}, maxp(pool_opts({2, 2}))));
  c.push_back(op("max_pool2d_k3s2p1", {f({2, 2, 7, 7})}, maxp(pool_opts({3, 3}, {2, 2}, {1, 1}))));
  c.push_back(op("max_pool2d_dilation", {f({1, 2, 7, 7})},
                 maxp(pool_opts({2, 2}, {1, 1}, {0, 0}, false, true, {2, 2}))));
  c.push_back(
      op("max_pool2d_ceil", {f({1, 2, 8, 8})}, maxp(pool_opts({3, 3}, {2, 2}, {0, 0}, true))));
  c.push_back(
      op("max_pool2d_channels_last", {f({2, 3, 4, 6}, L::channels_last)}, maxp(pool_opts({2, 3}))));
  c.push_back(op("avg_pool2d", {f({2, 3, 6, 6})}, avgp(pool_opts({2, 2}))));
  c.push_back(op("avg_pool2d_pad_counted", {f({2, 2, 7, 7})},
                 avgp(pool_opts({3, 3}, {2, 2}, {1, 1}, false, true))));
  c.push_back(op("avg_pool2d_pad_excluded", {f({2, 2, 7, 7})},
                 avgp(pool_opts({3, 3}, {2, 2}, {1, 1}, false, false))));
  c.push_back(
      op("avg_pool2d_ceil", {f({1, 2, 7, 7})}, avgp(pool_opts({2, 2}, {2, 2}, {0, 0}, true))));
  c.push_back(op("avg_pool2d_strided", {f({1, 2, 4, 4}, L::strided)}, avgp(pool_opts({2, 2}))));
  c.push_back(op("adaptive_avg_pool2d_global", {f({2, 3, 5, 5})}, [](const Inputs& x) {
    return adaptive_avg_pool2d(x[0], {1, 1});
  }));
  c.push_back(op("adaptive_avg_pool2d_uneven", {f({2, 3, 7, 5})}, [](const Inputs& x) {
    return adaptive_avg_pool2d(x[0], {3, 2});
  }));
  c.push_back(
      op("adaptive_avg_pool2d_overlap", {f({1, 2, 6, 6}, L::channels_last)}, [](const Inputs& x) {
        return adaptive_avg_pool2d(x[0], {4, 4});
      }));

  // ------------------------------------------------------------------------------- batch_norm
  // Inputs: x, running_mean, running_var, weight, bias. The running stats are cloned inside the
  // lambda (batch_norm updates them in place) and returned as extra outputs, so their update is
  // compared with the reference too; gradients flow only through output 0.
  const In rm = nograd(range({3}, -0.5, 0.5));
  const In rv = nograd(range({3}, 0.5, 1.5));
  const In gamma = range({3}, 0.5, 1.5);
  const In beta = f({3});
  auto bn_train = [](const Inputs& x) {
    Tensor mean = x[1].clone(), var = x[2].clone();
    Tensor y = batch_norm(x[0], mean, var, x[3], x[4], true, 0.1, 1e-5);
    return std::vector<Tensor>{y, mean, var};
  };
  c.push_back(
      opn("batch_norm_train", {f({4, 3, 3, 2}), rm, rv, gamma, beta}, bn_train).grad_outputs(1));
  c.push_back(
      opn("batch_norm_train_2d", {f({6, 3}), rm, rv, gamma, beta}, bn_train).grad_outputs(1));
  c.push_back(
      opn("batch_norm_train_3d", {f({3, 3, 4}, L::transposed), rm, rv, gamma, beta}, bn_train)
          .grad_outputs(1));
  c.push_back(opn("batch_norm_train_channels_last",
                  {f({2, 3, 3, 3}, L::channels_last), rm, rv, gamma, beta}, bn_train)
                  .grad_outputs(1));
  c.push_back(op("batch_norm_train_no_stats", {f({4, 3, 2, 2}), gamma, beta}, [](const Inputs& x) {
    return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true, 0.1, 1e-5);
  }));
  c.push_back(op("batch_norm_train_no_affine", {f({4, 3, 2, 2})}, [](const Inputs& x) {
    return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-3);
  }));
  c.push_back(op("batch_norm_eval", {f({4, 3, 2, 2}), rm, rv, gamma, beta}, [](const Inputs& x) {
    return batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1, 1e-5);
  }));
  c.push_back(op(
      "batch_norm_eval_2d", {f({5, 3}, L::strided), rm, rv, gamma, beta},
      [](const Inputs& x) { return batch_norm(x[0], x[1], x[2], x[3], x[4], false, 0.1, 1e-5); }));

  // ------------------------------------------------------------------------------- layer_norm
  c.push_back(op("layer_norm", {f({4, 6}), range({6}, 0.5, 1.5), f({6})},
                 [](const Inputs& x) { return layer_norm(x[0], {6}, x[1], x[2]); }));
  c.push_back(op("layer_norm_2d_shape", {f({2, 3, 4}), range({3, 4}, 0.5, 1.5), f({3, 4})},
                 [](const Inputs& x) {
                   return layer_norm(x[0], {3, 4}, x[1], x[2], 1e-6);
                 }));
  c.push_back(op("layer_norm_no_affine", {f({3, 5})},
                 [](const Inputs& x) { return layer_norm(x[0], {5}); }));
  c.push_back(op("layer_norm_noncontig", {f({5, 4}, L::transposed), range({4}, 0.5, 1.5), f({4})},
                 [](const Inputs& x) { return layer_norm(x[0], {4}, x[1], x[2]); }));
  c.push_back(op("layer_norm_wide", {f({2, 200}), range({200}, 0.5, 1.5), f({200})},
                 [](const Inputs& x) { return layer_norm(x[0], {200}, x[1], x[2]); }));

  // --------------------------------------------------------------------------------- rms_norm
  c.push_back(op("rms_norm", {f({4, 6}), range({6}, 0.5, 1.5)},
                 [](const Inputs& x) { return rms_norm(x[0], {6}, x[1], 1e-5); }));
  c.push_back(op("rms_norm_2d_shape", {f({2, 3, 4}), range({3, 4}, 0.5, 1.5)}, [](const Inputs& x) {
    return rms_norm(x[0], {3, 4}, x[1]);
  }));
  c.push_back(
      op("rms_norm_no_weight", {f({3, 5})}, [](const Inputs& x) { return rms_norm(x[0], {5}); }));
  c.push_back(op("rms_norm_noncontig", {f({5, 4}, L::transposed), range({4}, 0.5, 1.5)},
                 [](const Inputs& x) { return rms_norm(x[0], {4}, x[1]); }));

  // ------------------------------------------------------------------------- rotary_embedding
  // q/k heads [B, H, T, D] (also as a [B, T, H, D] projection transposed: not contiguous, and as
  // 3-D rows) rotated by the tables of positions 0..T-1 (constants, as in a model).
  auto rope = [](int64_t t, int64_t d) {
    return [t, d](const Inputs& x) {
      const auto [cos, sin] =
          rotary_tables(t, d, 100.0, {.dtype = x[0].dtype(), .device = x[0].device()});
      return rotary_embedding(x[0], cos, sin);
    };
  };
  c.push_back(op("rotary_embedding", {f({2, 3, 5, 8})}, rope(5, 8)));
  c.push_back(op("rotary_embedding_heads_transposed", {f({2, 5, 3, 4})},
                 [rope](const Inputs& x) { return rope(5, 4)({x[0].transpose(1, 2)}); }));
  c.push_back(op("rotary_embedding_rows", {f({3, 7, 6})}, rope(7, 6)));
  // 4-D with a strided last dim: rotated through a contiguous copy, returned in x's shape.
  c.push_back(op("rotary_embedding_strided_last_dim", {f({2, 3, 4, 5})},
                 [rope](const Inputs& x) { return rope(5, 4)({x[0].transpose(2, 3)}); }));

  // -------------------------------------------------------------------------------- attention
  // The fused kernel; attention_test.cpp also checks it against the composite it replaces.
  auto attn = [](bool causal) {
    return [causal](const Inputs& x) {
      AttentionOptions o;
      o.causal = causal;
      return scaled_dot_product_attention(x[0], x[1], x[2], o);
    };
  };
  c.push_back(op("attention", {f({2, 5, 4}), f({2, 7, 4}), f({2, 7, 3})}, attn(false)));
  c.push_back(
      op("attention_causal", {f({1, 2, 6, 4}), f({1, 2, 6, 4}), f({1, 2, 6, 4})}, attn(true)));
  c.push_back(op("attention_noncontig",
                 {f({3, 4}, L::transposed), f({5, 4}), f({5, 2}, L::strided)}, attn(false)));
  c.push_back(op("masked_fill", {f({3, 4}), mask({3, 4})},
                 [](const Inputs& x) { return masked_fill(x[0], x[1], -2.5); }));
  c.push_back(op("tril", {f({2, 3, 5})}, [](const Inputs& x) { return tril(x[0], 1); }));
  c.push_back(
      op("triu", {f({4, 3}, L::transposed)}, [](const Inputs& x) { return triu(x[0], -1); }));

  // ----------------------------------------------------------------------- empty batches
  // PyTorch accepts a batch of 0 for these and returns an empty result (gradients: empty too).
  c.push_back(op("conv2d_empty_batch", {f({0, 3, 5, 5}), f({4, 3, 3, 3}), f({4})}, conv({})));
  c.push_back(op("max_pool2d_empty_batch", {f({0, 2, 4, 4})}, maxp(pool_opts({2, 2}))));
  c.push_back(op("avg_pool2d_empty_batch", {f({0, 2, 4, 4})}, avgp(pool_opts({2, 2}))));
  c.push_back(op("layer_norm_empty_batch", {f({0, 6}), range({6}, 0.5, 1.5), f({6})},
                 [](const Inputs& x) { return layer_norm(x[0], {6}, x[1], x[2]); }));
  c.push_back(
      op("softmax_loss_empty_batch", {f({0, 5}), idx({0}, 0, 5)}, ce(ce_opts(Reduction::none))));
  c.push_back(op("linear_empty_batch", {f({0, 7}), f({4, 7}), f({4})},
                 [](const Inputs& x) { return linear(x[0], x[1], x[2]); }));

  // ---------------------------------------------------------------------------------- dropout
  c.push_back(op("dropout_p0_training", {f({4, 5})},
                 [](const Inputs& x) { return dropout(x[0], 0.0, true); }));
  c.push_back(op("dropout_eval", {f({4, 5}, L::transposed)},
                 [](const Inputs& x) { return dropout(x[0], 0.5, false); }));
  return c;
}

}  // namespace gradus::harness
