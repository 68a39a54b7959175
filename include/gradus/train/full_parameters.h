// A scope in which a model's parameters hold their whole values (gradus::train).
#pragma once

#include <functional>
#include <utility>

namespace gradus::train {

// While it lives, every parameter of the model holds its whole value: under fully sharded
// training (Strategy "fsdp") the strategy gathers them, a collective, so every data rank makes one
// at the same point; what is written into them meanwhile (a checkpoint's load) is taken into the
// shards when it ends. Under the other strategies it does nothing.
class FullParameters {
 public:
  FullParameters() = default;
  explicit FullParameters(std::function<void()> end) : end_(std::move(end)) {}
  FullParameters(FullParameters&& other) noexcept : end_(std::exchange(other.end_, nullptr)) {}
  FullParameters& operator=(FullParameters&& other) noexcept {
    if (this != &other) {
      finish();
      end_ = std::exchange(other.end_, nullptr);
    }
    return *this;
  }
  FullParameters(const FullParameters&) = delete;
  FullParameters& operator=(const FullParameters&) = delete;
  ~FullParameters() { finish(); }

 private:
  void finish() {
    if (end_) std::exchange(end_, nullptr)();
  }
  std::function<void()> end_;
};

}  // namespace gradus::train
