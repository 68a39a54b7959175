// gradus::optim: optimizers, learning-rate schedulers and gradient clipping.
#pragma once

#include "gradus/optim/adam.h"
#include "gradus/optim/clip.h"
#include "gradus/optim/optimizer.h"
#include "gradus/optim/scheduler.h"
#include "gradus/optim/sgd.h"
