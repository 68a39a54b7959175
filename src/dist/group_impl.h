// Internal to gradus::dist: how the world's group is assembled from its engines.
#pragma once

#include <memory>
#include <string>

#include "gradus/dist/process_group.h"

namespace gradus::dist::detail {

class MpiEngine;

// The collectives on CUDA tensors (NCCL), in the run-time module libgradus_dist_nccl.so
// (src/dist/nccl/); make_nccl_backend() returns nullptr when it is absent or cannot load, and
// nccl_status() says why.
class NcclBackend {
 public:
  virtual ~NcclBackend() = default;
  virtual WorkPtr all_reduce(const Tensor& t, ReduceOp op, const std::string& label) = 0;
  virtual WorkPtr broadcast(const Tensor& t, int root, const std::string& label) = 0;
  virtual WorkPtr reduce(const Tensor& t, int root, ReduceOp op, const std::string& label) = 0;
  virtual WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op,
                                 const std::string& label) = 0;
  virtual WorkPtr all_gather(const Tensor& output, const Tensor& input,
                             const std::string& label) = 0;
  virtual WorkPtr send(const Tensor& t, int dst, const std::string& label) = 0;
  virtual WorkPtr recv(const Tensor& t, int src, const std::string& label) = 0;
};

// Creates the NCCL communicator of the world on first use: rank 0's unique id is broadcast
// through `bootstrap` (MPI), then every rank joins on its current CUDA device.
std::unique_ptr<NcclBackend> make_nccl_backend(ProcessGroup& bootstrap, const World& world);
std::string nccl_status();

std::shared_ptr<ProcessGroup> make_world_group(const World& world, const InitOptions& options);
// The running MPI engine; throws DistError after finalize().
MpiEngine& mpi_engine();

}  // namespace gradus::dist::detail
