// gradus::io: safetensors weights, module save/load and crash-safe training checkpoints.
#pragma once

#include "gradus/io/atomic_file.h"
#include "gradus/io/checkpoint.h"
#include "gradus/io/checkpoint_set.h"
#include "gradus/io/dir_lock.h"
#include "gradus/io/hf.h"
#include "gradus/io/hf_gpt2.h"
#include "gradus/io/module_io.h"
#include "gradus/io/safetensors.h"
