// gradus::dist: training on several processes, GPUs and hosts (MPI for processes and CPU tensors,
// NCCL for CUDA tensors).
#pragma once

#include "gradus/dist/ddp.h"
#include "gradus/dist/process_group.h"
