// Indexing ops: gather, scatter_add (out of place), index_select, embedding, one_hot.
//
// Index tensors may be int64 or int32 (converted to contiguous int64 for the kernels). Every
// index is range-checked before a kernel sees it, so a bad index is an IndexError naming the op,
// the value and the valid range instead of an out-of-bounds access. On the CPU the check is a
// host loop over the data; on a GPU it is one min/max reduction read back to the host.
#include <algorithm>
#include <utility>

#include "ops/common.h"

namespace gradus {
namespace ops {
namespace {

using backend::ReduceOp;

// The index as a contiguous int64 tensor; DTypeError unless it is int64 or int32.
Tensor index_i64(const char* op, const Tensor& index, const char* what = "index") {
  GRADUS_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, DTypeError, op, ": ",
               what, " must be int64 or int32, got ", dtype_name(index.dtype()));
  return contiguous_raw(cast_raw(index, DType::i64));
}

// {min, max} of a non-empty contiguous int64 tensor (one_hot's inferred class count: a read
// back to the host, as in PyTorch; pass num_classes to avoid it).
std::pair<int64_t, int64_t> index_bounds(const Tensor& idx) {
  if (idx.device().is_cpu()) {
    const int64_t* p = idx.data_ptr<int64_t>();
    const auto [lo, hi] = std::minmax_element(p, p + idx.numel());
    return {*lo, *hi};
  }
  // One [2] result and a single device-to-host read.
  Tensor bounds = new_empty({2}, DType::i64, idx.device());
  const Tensor flat = idx.as_strided_raw({idx.numel()}, {1}, idx.offset());
  backend_of(idx).reduce(ReduceOp::min, flat, bounds.as_strided_raw({1}, {1}, 0), {0});
  backend_of(idx).reduce(ReduceOp::max, flat, bounds.as_strided_raw({1}, {1}, 1), {0});
  const std::vector<int64_t> v = bounds.to_vector<int64_t>();
  return {v[0], v[1]};
}

// IndexError unless every value of idx (contiguous int64) lies in [0, size). On a GPU the check
// runs on the device and reports at the next host sync (backend::Backend::check_index_range).
// `op` and `what` must be string literals.
void check_index_range(const char* op, const Tensor& idx, int64_t size, const char* what) {
  if (idx.numel() == 0) return;
  backend_of(idx).check_index_range(
      idx, {.op = op, .what = what, .size = size, .allowed = std::nullopt});
}

// gather/scatter_add shape rules (PyTorch's): same rank; index.size(d) <= x.size(d) for d != dim.
void check_gather_shapes(const char* op, const Tensor& x, int64_t dim, const Tensor& index) {
  GRADUS_CHECK(index.dim() == x.dim(), ShapeError, op, ": index must have the same rank as the ",
               "input, got index ", shape_str(index.sizes()), " and input ", shape_str(x.sizes()));
  for (int64_t d = 0; d < x.dim(); ++d) {
    GRADUS_CHECK(d == dim || index.size(d) <= x.size(d), ShapeError, op, ": index ",
                 shape_str(index.sizes()), " is larger than the input ", shape_str(x.sizes()),
                 " in dimension ", d, " (", index.size(d), " vs ", x.size(d), ")");
  }
}

// A 0-d tensor is indexed as a [1] tensor (PyTorch allows gather on scalars).
Tensor lift(const Tensor& t) {
  return t.dim() == 0 ? t.as_strided_raw({1}, {1}, t.offset()) : t;
}

// grad [index shape] scattered back into zeros of `shape` along dim (gather's backward).
Tensor scatter_into_zeros(const Shape& shape, int64_t dim, const Tensor& idx, const Tensor& g) {
  Tensor out = zeros(shape, g.options());
  if (idx.numel() > 0) {
    backend_of(out).scatter_add(lift(out), dim, lift(idx), lift(contiguous_raw(g)));
  }
  return out;
}

// Rows of a contiguous [V, D] table picked by idx (contiguous int64) -> [n, D].
Tensor select_rows(const Tensor& table, const Tensor& idx, int64_t d) {
  Tensor out = new_empty({idx.numel(), d}, table.dtype(), table.device());
  if (out.numel() > 0) {
    backend_of(table).index_select_rows(table, idx.as_strided_raw({idx.numel()}, {1}, idx.offset()),
                                        out);
  }
  return out;
}

// grad_table [V, D] from grad rows [n, D]: rows added at their indices (embedding's backward).
Tensor add_rows(const Tensor& grad_rows, const Tensor& idx, int64_t v, int64_t d) {
  Tensor table = zeros({v, d}, grad_rows.options());
  if (grad_rows.numel() > 0) {
    backend_of(table).index_add_rows(contiguous_raw(grad_rows),
                                     idx.as_strided_raw({idx.numel()}, {1}, idx.offset()), table);
  }
  return table;
}

}  // namespace
}  // namespace ops

using namespace ops;

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  GRADUS_PROFILE_OP("gather");
  check_defined("gather", {&x, &index});
  check_same_device("gather", {&x, &index});
  const int64_t d = normalize_dim(dim, x.dim(), "gather");
  const Tensor idx = index_i64("gather", index);
  check_gather_shapes("gather", x, d, idx);
  check_index_range("gather", idx, x.dim() == 0 ? 1 : x.size(d), "index");
  Tensor out = new_empty(idx.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) backend_of(x).gather(lift(contiguous_raw(x)), d, lift(idx), lift(out));
  return record(
      "gather", out, {x},
      [shape = x.sizes(), d, si = SavedTensor(idx)](const TensorList& g, const NeedsGrad&) {
        return TensorList{scatter_into_zeros(shape, d, si.get(), g[0])};
      });
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  GRADUS_PROFILE_OP("scatter_add");
  check_defined("scatter_add", {&x, &index, &src});
  check_same_device("scatter_add", {&x, &index, &src});
  const int64_t d = normalize_dim(dim, x.dim(), "scatter_add");
  const Tensor idx = index_i64("scatter_add", index);
  check_gather_shapes("scatter_add", x, d, idx);
  GRADUS_CHECK(src.dim() == idx.dim(), ShapeError,
               "scatter_add: src must have the same rank as index, got src ",
               shape_str(src.sizes()), " and index ", shape_str(idx.sizes()));
  for (int64_t i = 0; i < src.dim(); ++i) {
    GRADUS_CHECK(idx.size(i) <= src.size(i), ShapeError, "scatter_add: index ",
                 shape_str(idx.sizes()), " is larger than src ", shape_str(src.sizes()),
                 " in dimension ", i);
  }
  GRADUS_CHECK(src.dtype() == x.dtype(), DTypeError, "scatter_add: src dtype ",
               dtype_name(src.dtype()), " differs from the input's ", dtype_name(x.dtype()));
  check_index_range("scatter_add", idx, x.dim() == 0 ? 1 : x.size(d), "index");
  Tensor out = new_empty(x.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) backend_of(x).copy(x, out);
  if (idx.numel() > 0) {
    // The kernel walks index's shape; only that corner of src takes part.
    const Tensor src_used =
        contiguous_raw(src.as_strided_raw(idx.sizes(), src.strides(), src.offset()));
    backend_of(x).scatter_add(lift(out), d, lift(idx), lift(src_used));
  }
  return record("scatter_add", out, {x, src},
                [d, si = SavedTensor(idx), src_shape = src.sizes()](const TensorList& g,
                                                                    const NeedsGrad& needs) {
                  TensorList grads{needs[0] ? g[0] : Tensor(), Tensor()};
                  if (needs[1]) {
                    const Tensor idx = si.get();
                    Tensor picked = new_empty(idx.sizes(), g[0].dtype(), g[0].device());
                    Tensor gs = zeros(src_shape, g[0].options());
                    if (picked.numel() > 0) {
                      backend_of(picked).gather(lift(contiguous_raw(g[0])), d, lift(idx),
                                                lift(picked));
                      // Elements of src outside index's shape did not contribute: zero grad.
                      backend_of(gs).copy(picked, gs.as_strided_raw(idx.sizes(), gs.strides(), 0));
                    }
                    grads[1] = gs;
                  }
                  return grads;
                });
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  GRADUS_PROFILE_OP("index_select");
  check_defined("index_select", {&x, &index});
  check_same_device("index_select", {&x, &index});
  const int64_t d = normalize_dim(dim, x.dim(), "index_select");
  GRADUS_CHECK(index.dim() <= 1, ShapeError, "index_select: index must be 0-D or 1-D, got ",
               shape_str(index.sizes()));
  const Tensor idx = index_i64("index_select", index);
  const int64_t n = idx.numel();
  const Tensor xl = lift(x);
  const int64_t size = xl.size(d);
  check_index_range("index_select", idx, size, "index");
  Shape out_shape = xl.sizes();
  out_shape[d] = n;
  if (x.dim() == 0) out_shape = index.dim() == 0 ? Shape{} : Shape{n};

  // Viewed as [outer, size, inner]: outer == 1 (dim 0) is a row gather from a [size, inner]
  // table; other dims gather with the index broadcast along the other axes.
  int64_t outer = 1;
  for (int64_t i = 0; i < d; ++i) outer *= xl.size(i);
  int64_t inner = 1;
  for (int64_t i = d + 1; i < xl.dim(); ++i) inner *= xl.size(i);
  Tensor out;
  Tensor expanded_idx;  // the broadcast index for the gather path (kept for backward)
  if (outer == 1) {
    const Tensor table = contiguous_raw(xl);
    out = select_rows(table.as_strided_raw({size, inner}, {inner, 1}, table.offset()), idx, inner);
  } else {
    Shape view(xl.dim(), 1);
    view[d] = n;
    Shape target = xl.sizes();
    target[d] = n;
    expanded_idx = contiguous_raw(
        broadcast_raw(idx.as_strided_raw(view, contiguous_strides(view), 0), target));
    out = new_empty(target, x.dtype(), x.device());
    if (out.numel() > 0) backend_of(x).gather(contiguous_raw(xl), d, expanded_idx, out);
  }
  out = out.as_strided_raw(out_shape, contiguous_strides(out_shape), 0);
  return record("index_select", out, {x},
                [shape = x.sizes(), d, n, outer, size, inner, si = SavedTensor(idx),
                 se = SavedTensor(expanded_idx)](const TensorList& g, const NeedsGrad&) {
                  if (outer == 1) {
                    const Tensor rows = add_rows(g[0].reshape({n, inner}), si.get(), size, inner);
                    return TensorList{rows.as_strided_raw(shape, contiguous_strides(shape), 0)};
                  }
                  return TensorList{scatter_into_zeros(shape, d, se.get(), g[0])};
                });
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  GRADUS_PROFILE_OP("embedding");
  check_defined("embedding", {&weight, &indices});
  check_same_device("embedding", {&weight, &indices});
  GRADUS_CHECK(weight.dim() == 2, ShapeError,
               "embedding: weight must be 2-D [num_embeddings, embedding_dim], got ",
               shape_str(weight.sizes()));
  const Tensor idx = index_i64("embedding", indices, "indices");
  const int64_t v = weight.size(0), dm = weight.size(1);
  check_index_range("embedding", idx, v, "index");
  Tensor out = select_rows(contiguous_raw(weight), idx, dm);
  Shape out_shape = indices.sizes();
  out_shape.push_back(dm);
  out = out.as_strided_raw(out_shape, contiguous_strides(out_shape), 0);
  return record("embedding", out, {weight},
                [si = SavedTensor(idx), v, dm](const TensorList& g, const NeedsGrad&) {
                  const Tensor idx = si.get();
                  return TensorList{add_rows(g[0].reshape({idx.numel(), dm}), idx, v, dm)};
                });
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  GRADUS_PROFILE_OP("one_hot");
  check_defined("one_hot", {&indices});
  const Tensor idx = index_i64("one_hot", indices, "indices");
  GRADUS_CHECK(num_classes >= -1, ValueError, "one_hot: num_classes must be -1 (infer) or >= 0, ",
               "got ", num_classes);
  if (num_classes == -1) {
    GRADUS_CHECK(idx.numel() > 0, ValueError,
                 "one_hot: cannot infer the number of classes from an empty tensor; pass "
                 "num_classes");
    num_classes = index_bounds(idx).second + 1;
  }
  check_index_range("one_hot", idx, num_classes, "class index");
  Shape shape = indices.sizes();
  Shape col = shape;
  col.push_back(1);
  shape.push_back(num_classes);
  // out[..., c] = (index[...] == c)
  const Tensor classes = arange(num_classes, {.dtype = DType::i64, .device = indices.device()});
  return eq(idx.as_strided_raw(col, contiguous_strides(col), idx.offset()), classes).to(DType::i64);
}

}  // namespace gradus
