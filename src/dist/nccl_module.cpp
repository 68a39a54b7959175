// The NCCL engine for CUDA tensors is a run-time module, libgradus_dist_nccl.so, built with the
// CUDA backend module and installed beside it: gradus_dist itself links neither NCCL nor the CUDA
// runtime, so a CPU-only program using gradus::dist starts where they are absent. It is loaded
// the first time a group communicates a CUDA tensor (which needs the CUDA backend module loaded
// already, for the tensor to exist).
#include <dlfcn.h>

#include <string>

#include "core/shared_library.h"
#include "dist/group_impl.h"
#include "gradus/core/cuda.h"

extern "C" {
using NcclMakeFn = gradus::dist::detail::NcclBackend* (*)(gradus::dist::ProcessGroup*,
                                                          const gradus::dist::World*);
using NcclVersionFn = const char* (*)();
}

namespace gradus::dist {
namespace detail {
namespace {

constexpr const char* kModuleFile = "libgradus_dist_nccl.so";

struct NcclModule {
  NcclMakeFn make = nullptr;
  NcclVersionFn version = nullptr;
  std::string status;
};

NcclModule load() {
  if (!cuda::backend_loaded()) {
    return {nullptr, nullptr, "CUDA backend " + cuda::backend_status()};
  }
  const gradus::detail::OpenedModule opened = gradus::detail::open_module(
      kModuleFile, gradus::detail::library_directory(reinterpret_cast<void*>(&make_nccl_backend)));
  if (opened.handle == nullptr) {
    return {nullptr, nullptr,
            opened.missing ? std::string("no NCCL module (no ") + kModuleFile +
                                 " beside libgradus_dist.so nor on the loader's path)"
                           : opened.path + " did not load: " + opened.error};
  }
  auto make = reinterpret_cast<NcclMakeFn>(dlsym(opened.handle, "gradus_nccl_make_backend"));
  auto version = reinterpret_cast<NcclVersionFn>(dlsym(opened.handle, "gradus_nccl_version"));
  if (make == nullptr || version == nullptr) {
    return {nullptr, nullptr,
            opened.path + " lacks gradus_nccl_make_backend / gradus_nccl_version"};
  }
  return {make, version, "loaded from " + opened.path};
}

const NcclModule& nccl_module() {
  static const NcclModule m = load();
  return m;
}

}  // namespace

std::unique_ptr<NcclBackend> make_nccl_backend(ProcessGroup& bootstrap, const World& world) {
  const NcclModule& m = nccl_module();
  if (m.make == nullptr) return nullptr;
  return std::unique_ptr<NcclBackend>(m.make(&bootstrap, &world));
}

std::string nccl_status() {
  return nccl_module().status;
}

}  // namespace detail

std::string nccl_version() {
  const detail::NcclModule& m = detail::nccl_module();
  return m.version != nullptr ? std::string(m.version()) : "not available (" + m.status + ")";
}

}  // namespace gradus::dist
