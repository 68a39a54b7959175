// The range check of an index tensor (embedding, index_select, gather, scatter_add, one_hot,
// cross-entropy targets) and the error it raises, shared by both backends. The CPU backend checks
// at once; the CUDA backend checks on the device, without stopping the host, and raises the same
// IndexError at the next point where the host waits for the device (see docs/design.md, "No host
// syncs in a training step").
//
// Header-only and free of device code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "gradus/core/error.h"

namespace gradus::backend {

struct IndexCheck {
  // The op and the operand, for the message. String literals: the CUDA backend may report the
  // error after the op has returned.
  const char* op = "";
  const char* what = "index";
  int64_t size = 0;                // valid values are [0, size)
  std::optional<int64_t> allowed;  // one more valid value: a class target's ignore_index
};

// "embedding: index 7 is out of range (valid range [0, 5))", or for class targets
// "cross_entropy: target 7 is out of range for 5 classes (valid range [0, 5), or ignore_index
// -100)".
inline std::string index_error_message(const IndexCheck& c, int64_t bad) {
  if (c.allowed) {
    return detail::str_cat(c.op, ": ", c.what, " ", bad, " is out of range for ", c.size,
                           " classes (valid range [0, ", c.size, "), or ignore_index ", *c.allowed,
                           ")");
  }
  return detail::str_cat(c.op, ": ", c.what, " ", bad, " is out of range (valid range [0, ", c.size,
                         "))");
}

}  // namespace gradus::backend
