// --cuda-graph: the training step captured once as a CUDA graph and replayed (gradus::cuda::Graph,
// docs/design.md "CUDA graphs"). A small model's step is a few hundred kernels of microseconds
// each, and launching them one by one from the host costs more than running them; a replay
// launches them all at once.
//
// The first steps run eagerly (warm-up: gradients, optimizer state and library workspaces get
// allocated). The next is captured with its batch copied into input tensors kept for the run and
// its loss copied into a kept tensor, then replayed, as every later step is after its batch is
// copied in. A batch of another shape (the epoch's last, smaller one) runs eagerly. A step that
// cannot be captured (dropout, a host read, ...) is reported once, with the reason, and the run
// continues eagerly. The caller's step must zero gradients in place (zero_grad(false)) and use an
// optimizer in capturable mode (Optimizer::set_capturable).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gradus/core/cuda.h"
#include "gradus/core/tensor.h"

namespace gradus::train {

// Eager steps before --cuda-graph captures one: gradients, optimizer state and library workspaces
// exist by then, and cuDNN has picked its algorithms.
inline constexpr int64_t kGraphWarmupSteps = 3;

class StepGraph {
 public:
  // One training step on (input, target), returning its loss (0-d, on the device).
  using Step = std::function<Tensor(const Tensor& input, const Tensor& target)>;

  // enabled = false runs every step eagerly. `who` prefixes the messages ("gradus train").
  StepGraph(bool enabled, int64_t warmup_steps, std::string who);
  ~StepGraph();

  // Runs one step (see above) and returns its loss as a tensor of its own.
  Tensor run(const Tensor& input, const Tensor& target, const Step& step);

  bool replaying() const { return graph_ != nullptr; }
  int64_t replays() const { return replays_; }

 private:
  // Captures the step into graph_; false (reported) when it cannot be captured.
  bool capture(const Tensor& input, const Tensor& target, const Step& step);

  bool enabled_;
  int64_t warmup_;
  std::string who_;
  int64_t eager_ = 0;
  int64_t replays_ = 0;
  bool warned_shape_ = false;
  DType loss_dtype_ = DType::f32;
  std::unique_ptr<cuda::Graph> graph_;
  Tensor input_, target_, loss_;  // the graph's static buffers
};

}  // namespace gradus::train
