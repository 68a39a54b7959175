// gradus::nn: modules, layers, initialisers and ready-made models.
#pragma once

#include "gradus/nn/container.h"
#include "gradus/nn/gpt.h"
#include "gradus/nn/init.h"
#include "gradus/nn/layers.h"
#include "gradus/nn/llama.h"
#include "gradus/nn/models.h"
#include "gradus/nn/module.h"
#include "gradus/nn/resnet.h"
