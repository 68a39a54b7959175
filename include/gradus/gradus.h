// The umbrella header: everything a training program needs.
#pragma once

#include "gradus/autograd.h"
#include "gradus/core/determinism.h"
#include "gradus/core/device.h"
#include "gradus/core/dtype.h"
#include "gradus/core/error.h"
#include "gradus/core/host_memory.h"
#include "gradus/core/random.h"
#include "gradus/core/shape.h"
#include "gradus/core/tensor.h"
#include "gradus/core/threads.h"
#include "gradus/data/data.h"
#include "gradus/dist/dist.h"
#include "gradus/io/io.h"
#include "gradus/nn/nn.h"
#include "gradus/ops.h"
#include "gradus/optim/optim.h"
