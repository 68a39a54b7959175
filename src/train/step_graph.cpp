#include "gradus/train/step_graph.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "gradus/autograd.h"
#include "gradus/ops.h"

namespace gradus::train {

StepGraph::StepGraph(bool enabled, int64_t warmup_steps, std::string who)
    : enabled_(enabled), warmup_(std::max<int64_t>(warmup_steps, 1)), who_(std::move(who)) {}

StepGraph::~StepGraph() = default;

Tensor StepGraph::run(const Tensor& input, const Tensor& target, const Step& step) {
  if (!enabled_) return step(input, target);
  if (graph_ == nullptr && eager_ < warmup_) {
    ++eager_;
    Tensor loss = step(input, target);
    loss_dtype_ = loss.dtype();
    return loss;
  }
  if (graph_ == nullptr && !capture(input, target, step)) {
    enabled_ = false;  // reported; eager from now on
    return step(input, target);
  }
  if (input.sizes() != input_.sizes() || target.sizes() != target_.sizes()) {
    if (!warned_shape_) {
      warned_shape_ = true;
      std::fprintf(stderr,
                   "%s: --cuda-graph: a batch of shape %s differs from the captured %s; such "
                   "batches run without the graph\n",
                   who_.c_str(), shape_str(input.sizes()).c_str(),
                   shape_str(input_.sizes()).c_str());
    }
    return step(input, target);
  }
  NoGradGuard no_grad;
  input_.copy_(input);
  target_.copy_(target);
  graph_->replay();
  ++replays_;
  return loss_.clone();
}

bool StepGraph::capture(const Tensor& input, const Tensor& target, const Step& step) {
  NoGradGuard no_grad;
  input_ = input.clone();
  target_ = target.clone();
  loss_ = empty({}, {loss_dtype_, input.device()});
  auto graph = std::make_unique<cuda::Graph>(input.device().index());
  try {
    graph->capture([&] {
      const Tensor loss = step(input_, target_);
      NoGradGuard inner;
      loss_.copy_(loss);
    });
  } catch (const GraphCaptureError& e) {
    std::fprintf(stderr,
                 "%s: --cuda-graph: the training step cannot be captured, so it runs "
                 "without a graph: %s\n",
                 who_.c_str(), e.what());
    input_ = target_ = loss_ = Tensor();
    return false;
  }
  graph_ = std::move(graph);
  std::fprintf(stderr,
               "%s: --cuda-graph: captured the training step after %lld eager steps; replaying "
               "it\n",
               who_.c_str(), static_cast<long long>(eager_));
  return true;
}

}  // namespace gradus::train
