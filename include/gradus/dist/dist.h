// gradus::dist: training on several processes, GPUs and hosts (MPI for processes and CPU tensors,
// NCCL for CUDA tensors): process groups, DistributedDataParallel, a parameter server and the
// ZeRO-1 sharded optimizer.
#pragma once

#include "gradus/dist/ddp.h"
#include "gradus/dist/fsdp.h"
#include "gradus/dist/layout.h"
#include "gradus/dist/module_sync.h"
#include "gradus/dist/parameter_server.h"
#include "gradus/dist/pipeline.h"
#include "gradus/dist/process_group.h"
#include "gradus/dist/tensor_parallel.h"
#include "gradus/dist/tensor_parallel_attention.h"
#include "gradus/dist/tensor_parallel_gpt.h"
#include "gradus/dist/tensor_parallel_llama.h"
#include "gradus/dist/zero.h"
