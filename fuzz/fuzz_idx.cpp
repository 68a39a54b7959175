// libFuzzer harness for the IDX (MNIST format) reader: any byte string must either parse or throw
// gradus::Error -- never crash, read out of bounds, leak, or allocate from an unchecked size.
//  - every input goes to data::parse_idx (the in-memory parser behind read_idx);
//  - inputs that start with the gzip magic (1f 8b) also go through data::read_idx, which inflates
//    them first: the file is an in-memory memfd opened by its /proc/self/fd path, so no disk I/O.
// Build: -DGRADUS_FUZZ=ON with clang (fuzz/CMakeLists.txt); run: fuzz/run_fuzz.sh idx [seconds].
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gradus/core/error.h"
#include "gradus/data/idx.h"

namespace {

// Reads every element's bytes so the sanitizers see any bad extent.
void touch(const gradus::Tensor& t) {
  volatile uint8_t sink = 0;
  const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  for (size_t i = 0; i < n; ++i) sink = sink ^ p[i];
}

void parse_gzip(const uint8_t* data, size_t size) {
  const int fd = memfd_create("fuzz.idx.gz", 0);
  if (fd < 0) return;
  size_t done = 0;
  while (done < size) {
    const ssize_t w = ::write(fd, data + done, size - done);
    if (w <= 0) break;
    done += static_cast<size_t>(w);
  }
  try {
    touch(gradus::data::read_idx("/proc/self/fd/" + std::to_string(fd)));
  } catch (const gradus::Error&) {
    // Rejected with a typed error: the expected outcome for malformed input.
  }
  ::close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  try {
    touch(gradus::data::parse_idx(bytes, "fuzz"));
  } catch (const gradus::Error&) {
  }
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) parse_gzip(data, size);
  return 0;
}
