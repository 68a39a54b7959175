// libFuzzer harness for the safetensors reader: any byte string must either parse or throw
// gradus::Error -- never crash, read out of bounds, leak, or allocate from an unchecked size.
// Build and run: fuzz/run_fuzz_safetensors.sh (clang, -fsanitize=fuzzer,address,undefined).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gradus/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    gradus::io::SafetensorsFile f = gradus::io::parse_safetensors(data, size, "fuzz");
    // Touch every tensor's bytes so the sanitizers see any bad extent.
    volatile uint8_t sink = 0;
    for (const auto& [name, t] : f.tensors) {
      const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
      const auto* p = static_cast<const uint8_t*>(t.raw_data());
      for (size_t i = 0; i < n; ++i) sink = sink ^ p[i];
    }
  } catch (const gradus::Error&) {
    // Rejected with a typed error: the expected outcome for malformed input.
  }
  return 0;
}
