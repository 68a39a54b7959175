// Typed errors. gradus never aborts on user input: it throws one of these with a message that
// names the op, the shapes/dtypes/devices involved and what was expected.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace gradus {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ShapeError : public Error {
  using Error::Error;
};
class DTypeError : public Error {
  using Error::Error;
};
class DeviceError : public Error {
  using Error::Error;
};
class IndexError : public Error {
  using Error::Error;
};
class ValueError : public Error {
  using Error::Error;
};
class IOError : public Error {
  using Error::Error;
};
class OutOfMemoryError : public Error {
  using Error::Error;
};
// A CUDA graph capture (cuda::Graph::capture) met work that a graph cannot replay: a read back to
// the host, new random numbers, tensors created inside the captured region that outlive it.
class GraphCaptureError : public Error {
  using Error::Error;
};
// Raised by autograd: a saved tensor was modified in place, backward through a freed graph, ...
class AutogradError : public Error {
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace gradus

// GRADUS_CHECK(cond, ErrorType, "op: message ", value, ...) throws ErrorType when cond is false.
#define GRADUS_CHECK(cond, ErrorType, ...)                                \
  do {                                                                    \
    if (!(cond)) throw ErrorType(::gradus::detail::str_cat(__VA_ARGS__)); \
  } while (0)
