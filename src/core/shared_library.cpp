// gradus/src/core/shared_library.h: dladdr for where a library is, dlopen for the modules.
#include "core/shared_library.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

namespace gradus::detail {
namespace {

// The loader's names can be ".../bin/../lib/..." (from $ORIGIN): the file itself.
std::string resolved_path(const char* path) {
  char resolved[PATH_MAX];
  return realpath(path, resolved) != nullptr ? resolved : path;
}

}  // namespace

std::string library_path(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  return resolved_path(info.dli_fname);
}

std::string library_directory(const void* address) {
  const std::string path = library_path(address);
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

OpenedModule open_module(const std::string& file, const std::string& directory) {
  OpenedModule m;
  const std::string beside = directory + file;
  m.path = !directory.empty() && access(beside.c_str(), F_OK) == 0 ? beside : file;
  m.handle = dlopen(m.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (m.handle == nullptr) {
    const char* err = dlerror();
    m.error = err != nullptr ? err : "unknown dlopen error";
    // The loader names the file it could not find; a missing dependency names that instead.
    m.missing = m.path.find('/') == std::string::npos && m.error.find(m.path) != std::string::npos;
    return m;
  }
  const link_map* map = nullptr;
  if (dlinfo(m.handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
    m.path = resolved_path(map->l_name);
  }
  return m;
}

}  // namespace gradus::detail
