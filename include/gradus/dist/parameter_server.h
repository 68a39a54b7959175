// Data parallelism through a parameter server: the server rank holds the master parameters and
// steps the optimizer; every other rank (a worker) sends its gradients to the server and receives
// the updated parameters, each step. The server also trains on its share of the batch.
//
//   dist::ParameterServer ps(model, optimizer);   // broadcasts the server's parameters
//   loss.backward();
//   ps.step();                                    // instead of optimizer.step()
//
// Same result as DistributedDataParallel (the averaged gradient, one optimizer step), different
// traffic: all of it goes through the server's link, (size-1) x the gradients in and
// (size-1) x the parameters out per step, where a ring all-reduce moves 2 (size-1)/size x the
// gradients through every rank's link. bench/dist compares the two.
#pragma once

#include <memory>
#include <vector>

#include "gradus/dist/process_group.h"
#include "gradus/dist/tensor_parallel.h"
#include "gradus/nn/module.h"
#include "gradus/optim/optimizer.h"

namespace gradus::dist {

struct ParameterServerOptions {
  int server = 0;
  std::shared_ptr<ProcessGroup> group = nullptr;  // nullptr: default_group()
  // The model's split when tensor or pipeline parallelism splits it (each tensor rank and stage
  // has its own server over its data ranks): clipping then takes the whole model's norm over
  // the servers, which are data replica 0's tensor and pipeline groups. What it points to must
  // outlive the server.
  ModelParallel model_parallel = {};
};

class ParameterServer {
 public:
  // optimizer must hold model's parameters; only the server's is ever stepped.
  ParameterServer(std::shared_ptr<nn::Module> model, optim::Optimizer& optimizer,
                  ParameterServerOptions options = {});
  ~ParameterServer();
  // Averages the gradients on the server, clips them to a global 2-norm of max_grad_norm (when
  // > 0; optim::clip_grad_norm), steps its optimizer, and gives every worker the new parameters
  // and buffers. A parameter without a gradient counts as a zero gradient.
  void step(double max_grad_norm = 0);
  bool is_server() const { return group_->rank() == options_.server; }

 private:
  struct Layout;
  std::shared_ptr<nn::Module> model_;
  optim::Optimizer& optimizer_;
  ParameterServerOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<Tensor> params_;
  std::vector<std::unique_ptr<Layout>> layouts_;
};

}  // namespace gradus::dist
