// Shared helpers of the io tests: a scratch directory per test and raw-file builders.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "support/test_util.h"

namespace gradus::testing {

// A fresh directory under the system temp dir, removed after the test.
class IoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gradus_io_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// u64 LE length + header + data: a safetensors file exactly as given (no padding, no checks).
inline std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& data,
                                      uint64_t declared_len) {
  // Sized once and filled with memcpy (GCC 12's -Warray-bounds misfires on vector::insert here).
  std::vector<uint8_t> out(8 + header.size() + data.size());
  std::memcpy(out.data(), &declared_len, 8);
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}
inline std::vector<uint8_t> make_file(const std::string& header,
                                      const std::vector<uint8_t>& data = {}) {
  return make_file(header, data, header.size());
}

// n random bytes (any bit pattern: NaN payloads, subnormals, ... must survive a round trip).
inline std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// The bytes of a contiguous CPU tensor.
inline std::vector<uint8_t> tensor_bytes(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.raw_data());
  const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
  return n == 0 ? std::vector<uint8_t>{} : std::vector<uint8_t>(p, p + n);
}

// A CPU tensor of `dtype` and `shape` holding random bytes (bool: random 0/1).
inline Tensor random_raw_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = empty(shape, {dtype, Device::cpu()});
  const size_t n = static_cast<size_t>(t.numel()) * t.element_size();
  std::vector<uint8_t> bytes = random_bytes(n, seed);
  if (dtype == DType::boolean) {
    for (auto& b : bytes) b &= 1;
  }
  if (n) std::memcpy(t.raw_data(), bytes.data(), n);
  return t;
}

}  // namespace gradus::testing
