#include "gradus/autograd/raw_copy.h"

#include "ops/common.h"

namespace gradus {

void copy_unversioned(const Tensor& src, const Tensor& dst) {
  const char* op = "copy_unversioned";
  ops::check_defined(op, {&src, &dst});
  ops::check_same_device(op, {&src, &dst});
  GRADUS_CHECK(src.sizes() == dst.sizes(), ShapeError, op, ": source ", shape_str(src.sizes()),
               " and destination ", shape_str(dst.sizes()), " differ");
  if (dst.numel() > 0) ops::backend_of(dst).copy(src, dst);
}

void copy_to_host_memory(const Tensor& src, void* host) {
  GRADUS_CHECK(src.defined() && src.is_contiguous(), ValueError,
               "copy_to_host_memory: the source must be a defined, contiguous tensor");
  if (src.numel() > 0) ops::backend_of(src).copy_to_host(src, host);
}

}  // namespace gradus
