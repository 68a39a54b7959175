// gradus::amp: mixed-precision training tools.
#pragma once

#include "gradus/amp/grad_scaler.h"
