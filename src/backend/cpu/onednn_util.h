// What the CPU backend's oneDNN paths (onednn_gemm.cpp, half_conv.cpp) share: the engine, the
// primitive attributes, the check that oneDNN picked a fast kernel, and the primitive cache.
// Included only where GRADUS_HAS_ONEDNN is set.
#pragma once

#include <omp.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

namespace gradus::backend::cpu::onednn {

inline dnnl::engine& engine() {
  static dnnl::engine cpu(dnnl::engine::kind::cpu, 0);
  return cpu;
}

// Scratch memory comes from gradus's allocator (each call passes it), so that it counts against
// --memory-limit and shows in the memory statistics like every other buffer.
inline dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// False for oneDNN's reference loops, which are slower than the float32 path they would replace.
template <typename PrimitiveDesc>
bool is_fast(const PrimitiveDesc& pd) {
  return std::string(pd.impl_info_str()).rfind("ref", 0) != 0;
}

// The threads a primitive created now would run on: oneDNN's blocking depends on them, so they
// belong in every cache key.
inline int64_t threads() {
  return omp_in_parallel() ? 1 : omp_get_max_threads();
}

// Primitives by everything that shapes them. Creating one costs tens of microseconds, executing
// a cached one only the work. Bounded: a model has tens of shapes; past the limit it starts over.
template <typename Value>
class PrimitiveCache {
 public:
  using Key = std::vector<int64_t>;

  template <typename Create>
  Value get(const Key& key, Create&& create) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      if (cache_.size() >= kLimit) cache_.clear();
      it = cache_.emplace(key, create()).first;
    }
    return it->second;
  }

 private:
  static constexpr size_t kLimit = 512;
  std::mutex mutex_;
  std::map<Key, Value> cache_;
};

}  // namespace gradus::backend::cpu::onednn
