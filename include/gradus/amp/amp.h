// gradus::amp: mixed-precision training tools.
#pragma once

#include "gradus/amp/autocast.h"
#include "gradus/amp/grad_scaler.h"
