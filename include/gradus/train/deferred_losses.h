// The training loss of each step, kept where it was computed and read back in batches. On a GPU,
// reading the loss every step (loss.item()) makes the host wait for that step to finish before it
// queues the next, so the GPU idles while the host prepares each step; reading every few steps
// keeps its queue full. The trainers account for the values in step order, as if read each step,
// only later. On the CPU a read costs nothing, so the interval there is 1.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "gradus/core/tensor.h"
#include "gradus/ops.h"

namespace gradus::train {

struct StepLoss {
  int64_t step = 0;
  double lr = 0;
  int64_t samples = 0;  // in the global batch
  Tensor loss;          // 0-d, detached
};

class DeferredLosses {
 public:
  // Steps kept before due() says to read them back (GPU).
  static constexpr int64_t kDeviceInterval = 20;

  // every > 0 overrides the default interval (tests compare batched reads with per-step ones).
  DeferredLosses(const Device& device, int64_t every)
      : interval_(every > 0          ? every
                  : device.is_cuda() ? kDeviceInterval
                                     : 1) {}

  void add(StepLoss s) { pending_.push_back(std::move(s)); }
  bool due() const { return static_cast<int64_t>(pending_.size()) >= interval_; }

  // Reads every pending loss in one transfer and calls fn(const StepLoss&, double value) for each
  // in step order.
  template <typename F>
  void flush(const F& fn) {
    if (pending_.empty()) return;
    if (pending_.size() == 1) {  // the CPU's every-step read: no batching to do
      const StepLoss one = std::move(pending_.front());
      pending_.clear();
      fn(one, one.loss.item());
      return;
    }
    std::vector<Tensor> rows;
    rows.reserve(pending_.size());
    for (const StepLoss& p : pending_) rows.push_back(p.loss.reshape({1}).to(DType::f64));
    const std::vector<double> values = cat(rows, 0).to_vector<double>();
    std::vector<StepLoss> done = std::move(pending_);
    pending_.clear();
    for (size_t i = 0; i < done.size(); ++i) fn(done[i], values[i]);
  }

 private:
  int64_t interval_;
  std::vector<StepLoss> pending_;
};

}  // namespace gradus::train
