#include "common/shared_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve {

absl::StatusOr<SharedLibrary> SharedLibrary::Open(absl::string_view what, const char* path_variable,
                                                  std::initializer_list<const char*> names) {
  const char* path = std::getenv(path_variable);
  if (path != nullptr && path[0] != '\0') {
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return SharedLibrary(handle, path);
    const char* reason = dlerror();
    return absl::NotFoundError(absl::StrCat(what, " could not be loaded from ", path, " (",
                                            path_variable,
                                            "): ", reason != nullptr ? reason : "no reason given"));
  }
  std::string first_reason;
  for (const char* name : names) {
    // RTLD_LOCAL: the library's symbols are reached only through Bind, never by a later dlopen.
    void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) return SharedLibrary(handle, name);
    const char* reason = dlerror();
    if (first_reason.empty() && reason != nullptr) first_reason = reason;
  }
  return absl::NotFoundError(absl::StrCat(
      what, " is needed here but could not be loaded (tried ", absl::StrJoin(names, ", "),
      "): ", first_reason.empty() ? "no reason given" : first_reason,
      "; install it, add its directory to LD_LIBRARY_PATH or name the file in ", path_variable));
}

absl::StatusOr<void*> SharedLibrary::Find(const char* symbol) const {
  dlerror();
  void* address = dlsym(handle_, symbol);
  if (address == nullptr) {
    return absl::NotFoundError(absl::StrCat(name_, " has no ", symbol,
                                            " (older than the headers tpserve was built with?)"));
  }
  return address;
}

}  // namespace tpserve
