// Where gradus's own shared libraries are, and opening the run-time modules beside them (the CUDA
// backend, src/core/cuda_module.h; gradus_dist's NCCL engine, src/dist/nccl_module.cpp). Also
// what `gradus info` reports as the loaded copy of the CPU backend (kernels_info.cpp).
#pragma once

#include <string>

namespace gradus::detail {

// The resolved path of the shared library (or executable, in a static build) that contains
// `address`, a function or object of it; "" when the loader cannot say.
std::string library_path(const void* address);

// The directory of library_path(address), with a trailing '/'; "" when unknown.
std::string library_directory(const void* address);

// A run-time module opened with dlopen (RTLD_NOW | RTLD_LOCAL; the handle is never closed):
// `directory` + `file` if that file exists, else `file` as the loader finds it (a bare name on
// its search path, or a path as given).
struct OpenedModule {
  void* handle = nullptr;
  std::string path;      // what was opened (resolved) or tried
  std::string error;     // the loader's message when handle is null
  bool missing = false;  // a bare name the loader found nowhere
};
OpenedModule open_module(const std::string& file, const std::string& directory);

}  // namespace gradus::detail
