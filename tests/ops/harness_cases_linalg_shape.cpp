// Harness table: matmul / mm / bmm / linear, views and copies (reshape, permute, slice, expand,
// ...), cat / stack / split / chunk, and indexing (gather, scatter_add, index_select, embedding,
// one_hot).
#include "ops/harness.h"

namespace gradus::harness {
namespace {

using L = Layout;

std::vector<Tensor> as_list(std::vector<Tensor> v) {
  return v;
}

}  // namespace

std::vector<OpCase> linalg_shape_cases() {
  std::vector<OpCase> c;
  auto mm2 = [](const Inputs& x) { return matmul(x[0], x[1]); };
  // ------------------------------------------------------------------------------ matmul family
  c.push_back(op("matmul_2d", {f({5, 7}), f({7, 3})}, mm2));
  // 65-70-term dot products: float32 accumulation error grows like sqrt(K) eps |partial sums|,
  // beyond the 1e-6 absolute bound for results near 0; 4x the tolerance.
  c.push_back(op("matmul_2d_large_k", {f({9, 70}), f({70, 11})}, mm2).tolerance(4));
  // Transposed operands take the BLAS trans path; strided ones must be copied first.
  c.push_back(op("matmul_trans_a", {f({5, 7}, L::transposed), f({7, 3})}, mm2));
  c.push_back(op("matmul_trans_b", {f({5, 7}), f({7, 3}, L::transposed)}, mm2));
  c.push_back(op("matmul_trans_both", {f({4, 6}, L::transposed), f({6, 5}, L::transposed)}, mm2));
  c.push_back(op("matmul_strided", {f({4, 6}, L::strided), f({6, 3}, L::strided)}, mm2));
  c.push_back(op("matmul_vec_mat", {f({7}), f({7, 3})}, mm2));
  c.push_back(op("matmul_mat_vec", {f({5, 7}), f({7})}, mm2));
  c.push_back(op("matmul_dot", {f({9}), f({9})}, mm2));
  c.push_back(op("matmul_batched", {f({2, 4, 6}), f({2, 6, 3})}, mm2));
  c.push_back(op("matmul_bcast_rhs_2d", {f({3, 4, 6}), f({6, 5})}, mm2));
  c.push_back(op("matmul_bcast_lhs_2d", {f({4, 6}), f({3, 6, 5})}, mm2));
  c.push_back(op("matmul_bcast_batch", {f({2, 1, 3, 4}), f({3, 4, 5})}, mm2));
  c.push_back(op("matmul_batched_vec", {f({2, 3, 4}), f({4})}, mm2));
  c.push_back(op("matmul_batched_transposed", {f({2, 4, 6}, L::transposed), f({2, 6, 3})}, mm2));
  c.push_back(op("matmul_batched_channels_last", {f({2, 4, 6}, L::channels_last), f({6, 3})}, mm2));
  c.push_back(op("matmul_expanded_batch", {f({3, 4, 5}, L::expanded), f({3, 5, 2})}, mm2));
  c.push_back(op("matmul_empty_k", {f({3, 0}), f({0, 4})}, mm2));  // zeros [3, 4]
  c.push_back(op("matmul_empty_m", {f({0, 5}), f({5, 4})}, mm2));
  c.push_back(op("matmul_size1", {f({1, 5}), f({5, 1})}, mm2));
  c.push_back(op("mm", {f({4, 6}), f({6, 5}, L::transposed)},
                 [](const Inputs& x) { return mm(x[0], x[1]); }));
  c.push_back(
      op("bmm", {f({3, 4, 5}), f({3, 5, 2})}, [](const Inputs& x) { return bmm(x[0], x[1]); }));
  c.push_back(op("bmm_transposed", {f({3, 4, 5}, L::transposed), f({3, 5, 2}, L::transposed)},
                 [](const Inputs& x) { return bmm(x[0], x[1]); }));
  c.push_back(op("linear", {f({6, 7}), f({4, 7}), f({4})},
                 [](const Inputs& x) { return linear(x[0], x[1], x[2]); }));
  c.push_back(op("linear_no_bias", {f({6, 7}), f({4, 7})},
                 [](const Inputs& x) { return linear(x[0], x[1]); }));
  c.push_back(op("linear_3d", {f({2, 3, 7}), f({5, 7}), f({5})},
                 [](const Inputs& x) { return linear(x[0], x[1], x[2]); }));
  c.push_back(op("linear_1d", {f({7}), f({5, 7}), f({5})},
                 [](const Inputs& x) { return linear(x[0], x[1], x[2]); }));
  c.push_back(op("linear_noncontig", {f({6, 7}, L::strided), f({4, 7}, L::transposed), f({4})},
                 [](const Inputs& x) { return linear(x[0], x[1], x[2]); }));
  c.push_back(op("linear_large", {f({16, 65}), f({33, 65}), f({33})}, [](const Inputs& x) {
                return linear(x[0], x[1], x[2]);
              }).tolerance(4));
  // The projections of one input: q, k, v with biases (one of them missing), and a SwiGLU's
  // gate and up without, on a strided input.
  c.push_back(opn("linears", {f({2, 3, 7}), f({4, 7}), f({2, 7}), f({3, 7}), f({4}), f({3})},
                  [](const Inputs& x) {
                    return linears(x[0], {x[1], x[2], x[3]}, {x[4], Tensor(), x[5]});
                  }));
  c.push_back(opn("linears_noncontig", {f({6, 7}, L::strided), f({5, 7}, L::transposed), f({5, 7})},
                  [](const Inputs& x) {
                    return linears(x[0], {x[1], x[2]});
                  }));

  // --------------------------------------------------------------------------- views and copies
  const auto& fi = kFloatInt;
  c.push_back(op(
      "reshape", {f({2, 3, 4})},
      [](const Inputs& x) {
        return x[0].reshape({6, 4});
      },
      fi));
  c.push_back(op(
      "reshape_infer", {f({2, 3, 4})},
      [](const Inputs& x) {
        return x[0].reshape({-1, 3});
      },
      fi));
  // Not viewable: reshape must copy.
  c.push_back(op(
      "reshape_noncontig", {f({4, 6}, L::transposed)},
      [](const Inputs& x) { return x[0].reshape({24}); }, fi));
  c.push_back(op(
      "reshape_empty", {f({0, 6})},
      [](const Inputs& x) {
        return x[0].reshape({3, 0});
      },
      fi));
  c.push_back(op(
      "view", {f({2, 3, 4})},
      [](const Inputs& x) {
        return x[0].view({4, 6});
      },
      fi));
  c.push_back(op(
      "view_expanded", {f({6, 4}, L::expanded)},
      [](const Inputs& x) {
        return x[0].view({2, 3, 4});
      },
      fi));
  c.push_back(op(
      "flatten", {f({2, 3, 4})}, [](const Inputs& x) { return x[0].flatten(1); }, fi));
  c.push_back(op(
      "flatten_noncontig", {f({2, 3, 4}, L::channels_last)},
      [](const Inputs& x) { return x[0].flatten(); }, fi));
  c.push_back(op(
      "permute", {f({2, 3, 4})},
      [](const Inputs& x) {
        return x[0].permute({2, 0, 1});
      },
      fi));
  c.push_back(op(
      "permute_contiguous", {f({2, 3, 4}, L::strided)},
      [](const Inputs& x) {
        return x[0].permute({1, 2, 0}).contiguous();
      },
      fi));
  c.push_back(op(
      "transpose", {f({2, 3, 4})}, [](const Inputs& x) { return x[0].transpose(0, -1); }, fi));
  c.push_back(op(
      "t", {f({3, 5})}, [](const Inputs& x) { return x[0].t(); }, fi));
  c.push_back(op(
      "slice_step", {f({4, 9})}, [](const Inputs& x) { return x[0].slice(1, 1, 8, 3); }, fi));
  c.push_back(op(
      "slice_negative", {f({6, 4})}, [](const Inputs& x) { return x[0].slice(0, -4, -1); }, fi));
  c.push_back(op(
      "slice_clamped_end", {f({5, 3})}, [](const Inputs& x) { return x[0].slice(0, 2, 100); }, fi));
  c.push_back(op(
      "narrow", {f({4, 6}, L::transposed)}, [](const Inputs& x) { return x[0].narrow(1, 1, 2); },
      fi));
  c.push_back(op(
      "select", {f({3, 4, 5})}, [](const Inputs& x) { return x[0].select(1, -1); }, fi));
  c.push_back(op("select_then_mul", {f({3, 4, 5}, L::strided)},
                 [](const Inputs& x) { return mul(x[0].select(2, 1), 2.0); }));
  c.push_back(op(
      "expand", {f({3, 1})},
      [](const Inputs& x) {
        return x[0].expand({2, 3, 4});
      },
      fi));
  c.push_back(op(
      "expand_keep", {f({1, 4})},
      [](const Inputs& x) {
        return x[0].expand({3, -1});
      },
      fi));
  c.push_back(op(
      "expand_contiguous", {f({3, 1})},
      [](const Inputs& x) {
        return x[0].expand({3, 5}).contiguous();
      },
      fi));
  c.push_back(op(
      "squeeze_all", {f({3, 1, 4, 1})}, [](const Inputs& x) { return x[0].squeeze(); }, fi));
  c.push_back(op(
      "squeeze_dim", {f({3, 1, 4})}, [](const Inputs& x) { return x[0].squeeze(1); }, fi));
  c.push_back(op(
      "unsqueeze", {f({3, 4})}, [](const Inputs& x) { return x[0].unsqueeze(-1); }, fi));
  c.push_back(op(
      "clone", {f({3, 4}, L::transposed)}, [](const Inputs& x) { return x[0].clone(); }, fi));
  c.push_back(op(
      "contiguous", {f({2, 3, 4}, L::channels_last)},
      [](const Inputs& x) { return x[0].contiguous(); }, fi));
  c.push_back(op(
                  "to_f64", {f({3, 4})}, [](const Inputs& x) { return x[0].to(DType::f64); }, fi)
                  .any_dtype());
  // No gradcheck: a float32 output rounds away what a 1e-6 finite difference measures.
  c.push_back(op(
                  "to_f32", {f({3, 4}, L::transposed)},
                  [](const Inputs& x) { return x[0].to(DType::f32); }, fi)
                  .any_dtype()
                  .no_gradcheck());

  // In-place writes (no autograd by design: gradus allows them only on tensors without history)
  // through non-contiguous destinations, with broadcasting and casting.
  c.push_back(op(
                  "copy_into_transposed", {f({4, 5})},
                  [](const Inputs& x) {
                    Tensor out = zeros({5, 4}, x[0].options()).t();
                    out.copy_(x[0]);
                    return out;
                  },
                  fi)
                  .nondiff());
  c.push_back(op(
                  "copy_broadcast_cast", {f({4}, L::strided)},
                  [](const Inputs& x) {
                    Tensor out = zeros({3, 4}, {DType::f64, x[0].device()});
                    out.copy_(x[0]);
                    return out;
                  },
                  fi)
                  .nondiff()
                  .any_dtype());
  c.push_back(op("add_inplace_strided", {f({3, 5}), f({3})}, [](const Inputs& x) {
                Tensor y = x[0].clone();
                y.slice(1, 0, 5, 2).add_(x[1], 0.5);
                return y;
              }).nondiff());
  c.push_back(op(
                  "mul_inplace_transposed", {f({3, 4})},
                  [](const Inputs& x) {
                    Tensor y = x[0].clone().t();
                    y.mul_(3.0);
                    return y;
                  },
                  fi)
                  .nondiff());
  c.push_back(op(
                  "fill_slice", {f({4, 3}, L::transposed)},
                  [](const Inputs& x) {
                    Tensor y = x[0].clone();
                    y.slice(0, 1, 3).fill_(3.0);  // exact in every dtype
                    return y;
                  },
                  fi)
                  .nondiff());

  // -------------------------------------------------------------------- cat / stack / split
  c.push_back(op(
      "cat_dim0", {f({2, 3}), f({4, 3})},
      [](const Inputs& x) {
        return cat({x[0], x[1]}, 0);
      },
      fi));
  c.push_back(op(
      "cat_dim1_noncontig", {f({3, 2}, L::transposed), f({3, 4}, L::strided)},
      [](const Inputs& x) {
        return cat({x[0], x[1]}, 1);
      },
      fi));
  c.push_back(op(
      "cat_three_last", {f({2, 3, 1}), f({2, 3, 2}), f({2, 3, 4}, L::expanded)},
      [](const Inputs& x) {
        return cat({x[0], x[1], x[2]}, -1);
      },
      fi));
  c.push_back(op(
      "cat_with_empty", {f({2, 3}), f({0, 3}), f({1, 3})},
      [](const Inputs& x) {
        return cat({x[0], x[1], x[2]}, 0);
      },
      fi));
  c.push_back(op(
      "cat_single", {f({2, 3})}, [](const Inputs& x) { return cat({x[0]}, 1); }, fi));
  c.push_back(op(
      "stack_dim0", {f({2, 3}), f({2, 3}, L::transposed)},
      [](const Inputs& x) {
        return stack({x[0], x[1]}, 0);
      },
      fi));
  c.push_back(op(
      "stack_last", {f({2, 3}), f({2, 3}), f({2, 3}, L::strided)},
      [](const Inputs& x) {
        return stack({x[0], x[1], x[2]}, -1);
      },
      fi));
  c.push_back(opn(
      "split_size", {f({3, 5})}, [](const Inputs& x) { return as_list(split(x[0], 2, 1)); }, fi));
  c.push_back(opn(
      "split_sizes", {f({4, 3}, L::transposed)},
      [](const Inputs& x) {
        return as_list(split(x[0], std::vector<int64_t>{1, 3}, 0));
      },
      fi));
  c.push_back(opn("split_then_mul", {f({6, 2})}, [](const Inputs& x) {
    std::vector<Tensor> parts = split(x[0], 4, 0);
    return std::vector<Tensor>{mul(parts[0], 3.0), parts[1]};
  }));
  c.push_back(opn(
      "chunk_uneven", {f({7, 2})}, [](const Inputs& x) { return as_list(chunk(x[0], 3, 0)); }, fi));
  c.push_back(opn(
      "chunk_last", {f({2, 6}, L::strided)},
      [](const Inputs& x) { return as_list(chunk(x[0], 2, -1)); }, fi));

  // ---------------------------------------------------------------------------------- indexing
  c.push_back(op(
      "gather_dim1", {f({3, 5}), idx({3, 4}, 0, 5)},
      [](const Inputs& x) { return gather(x[0], 1, x[1]); }, fi));
  c.push_back(op(
      "gather_dim0", {f({3, 5}, L::transposed), idx({2, 5}, 0, 3)},
      [](const Inputs& x) { return gather(x[0], 0, x[1]); }, fi));
  c.push_back(op(
      "gather_3d", {f({2, 3, 4}), idx({2, 3, 6}, 0, 4)},
      [](const Inputs& x) { return gather(x[0], -1, x[1]); }, fi));
  // Repeated indices accumulate; on CUDA the order of atomic adds varies, hence .atomics().
  c.push_back(op(
                  "scatter_add_dim1", {f({3, 5}), idx({3, 4}, 0, 5), f({3, 4})},
                  [](const Inputs& x) { return scatter_add(x[0], 1, x[1], x[2]); }, fi)
                  .atomics());
  c.push_back(op(
                  "scatter_add_dim0", {f({3, 4}), idx({5, 4}, 0, 3), f({5, 4}, L::transposed)},
                  [](const Inputs& x) { return scatter_add(x[0], 0, x[1], x[2]); }, fi)
                  .atomics());
  c.push_back(op(
      "index_select_rows", {f({4, 5}), idx({6}, 0, 4)},
      [](const Inputs& x) { return index_select(x[0], 0, x[1]); }, fi));
  c.push_back(op(
      "index_select_cols", {f({4, 5}, L::transposed), idx({3}, 0, 5)},
      [](const Inputs& x) { return index_select(x[0], 1, x[1]); }, fi));
  c.push_back(op(
      "index_select_strided_index", {f({6, 3}), idx({4}, 0, 6, L::strided)},
      [](const Inputs& x) { return index_select(x[0], 0, x[1]); }, fi));
  c.push_back(op("embedding", {f({7, 4}), idx({2, 3}, 0, 7)},
                 [](const Inputs& x) { return embedding(x[0], x[1]); }));
  c.push_back(op("embedding_1d", {f({5, 3}), idx({9}, 0, 5)},
                 [](const Inputs& x) { return embedding(x[0], x[1]); }));
  const std::vector<DType> one = {DType::f32};
  c.push_back(
      op(
          "one_hot", {idx({5}, 0, 4)}, [](const Inputs& x) { return one_hot(x[0], 6); }, one)
          .nondiff());
  c.push_back(op(
                  "one_hot_inferred", {idx({2, 3}, 0, 4)},
                  [](const Inputs& x) { return one_hot(x[0]); }, one)
                  .nondiff());
  return c;
}

}  // namespace gradus::harness
