// Where a tensor lives.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gradus {

enum class DeviceType : uint8_t { CPU, CUDA };

class Device {
 public:
  constexpr Device() = default;
  constexpr Device(DeviceType type, int index) : type_(type), index_(index) {}

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  // cuda:0 when a CUDA device is present, else the CPU.
  static Device best();
  // "cpu", "cuda", "cuda:1", or "auto" (= best()). Throws ValueError naming the bad string.
  static Device parse(std::string_view text);

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  std::string str() const;

  friend bool operator==(const Device&, const Device&) = default;

 private:
  DeviceType type_ = DeviceType::CPU;
  int index_ = 0;
};

// Number of CUDA devices visible (0 without the CUDA backend module, a driver or a GPU); the
// same as cuda::device_count().
int cuda_device_count();

}  // namespace gradus
