// Module <-> safetensors: a thin layer over state_dict() / load_state_dict().
#include "gradus/io/module_io.h"

#include "gradus/io/safetensors.h"

namespace gradus::io {

void save_module(const nn::Module& module, const std::string& path,
                 const std::map<std::string, std::string>& metadata) {
  const nn::StateDict state = module.state_dict();
  save_safetensors(path, state.items(), metadata);
}

nn::LoadResult load_module(nn::Module& module, const std::string& path, bool strict) {
  SafetensorsFile file = read_safetensors(path);
  nn::StateDict state(std::move(file.tensors));
  // Prefix the module's own message with the file, keeping the error's type.
  try {
    return module.load_state_dict(state, strict);
  } catch (const ShapeError& e) {
    throw ShapeError(detail::str_cat("load_module(", path, "): ", e.what()));
  } catch (const ValueError& e) {
    throw ValueError(detail::str_cat("load_module(", path, "): ", e.what()));
  }
}

}  // namespace gradus::io
