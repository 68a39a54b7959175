// Making replicas agree: the one broadcast of a module's state every data-parallel strategy uses
// (DDP and the parameter server at construction, ZeRO-1 through the training layer), and the one
// buffer sync before a training forward (BatchNorm running statistics follow the root's, as
// PyTorch's DDP does with broadcast_buffers).
#pragma once

#include <map>
#include <string>

#include "gradus/dist/process_group.h"
#include "gradus/nn/module.h"

namespace gradus::dist {

// Collective over `group`: every rank gets `root`'s parameters and buffers (in place, without
// autograd history).
void broadcast_module_state(const nn::Module& module, ProcessGroup& group, int root = 0);

// Collective over `group`: every rank gets `root`'s buffers. Nothing to do in a group of one.
void broadcast_buffers(const nn::Module& module, ProcessGroup& group, int root = 0);

// Collective over `group`: `root` gets the union of every rank's named tensors (on the CPU), the
// other ranks an empty map. Each rank's names, dtypes and shapes travel first, so the ranks may
// hold different sets (pipeline stages gathering one process's state); a name held by two ranks
// is a ValueError on the root.
std::map<std::string, Tensor> gather_named_tensors(ProcessGroup& group,
                                                   const std::map<std::string, Tensor>& mine,
                                                   int root = 0);

}  // namespace gradus::dist
