// Saving and loading a module's weights as safetensors, under PyTorch's state_dict names, so a
// file written here loads with safetensors.torch.load_file + model.load_state_dict and vice versa.
#pragma once

#include <map>
#include <string>

#include "gradus/nn/module.h"

namespace gradus::io {

// Writes module.state_dict() (parameters and buffers, any device) atomically. A tensor shared by
// several names (tied weights) is written once per name, like PyTorch's state_dict.
void save_module(const nn::Module& module, const std::string& path,
                 const std::map<std::string, std::string>& metadata = {});

// Reads `path` and copies the values into the module in place (Module::load_state_dict: casts
// dtype, moves to each parameter's device). strict: every key must match and every shape agree,
// else one error lists all missing keys, unexpected keys and shape mismatches, and nothing is
// loaded. Non-strict: loads what matches and returns what did not.
nn::LoadResult load_module(nn::Module& module, const std::string& path, bool strict = true);

}  // namespace gradus::io
