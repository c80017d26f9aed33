// A shared library opened at run time (dlopen) instead of linked: the CUDA worker's cuBLASLt
// (540 MB) and NCCL (220 MB) are too large to ship, so they are found where the target machine has
// them, and a binary that never multiplies on a GPU or talks NCCL starts without them.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tpserve {

class SharedLibrary {
 public:
  // Opens the file the environment variable `path_variable` names when it is set (a user's own
  // build of the library, as vLLM's VLLM_NCCL_SO_PATH), otherwise the first of `names` the
  // dynamic loader finds (LD_LIBRARY_PATH, the ld.so cache, the default directories). NOT_FOUND
  // otherwise, naming `what`, what was tried and the loader's reason. The library stays loaded
  // for the life of the process: the function pointers taken from it are kept in statics.
  static absl::StatusOr<SharedLibrary> Open(absl::string_view what, const char* path_variable,
                                            std::initializer_list<const char*> names);

  // Sets *function to the library's `symbol`; NOT_FOUND naming both when it has none (a library
  // older than the headers this was built with).
  template <typename Function>
  absl::Status Bind(const char* symbol, Function* function) const {
    absl::StatusOr<void*> address = Find(symbol);
    if (!address.ok()) return address.status();
    *function = reinterpret_cast<Function>(*address);
    return absl::OkStatus();
  }

  // The name that was opened.
  const std::string& name() const { return name_; }

 private:
  SharedLibrary(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}
  absl::StatusOr<void*> Find(const char* symbol) const;

  void* handle_ = nullptr;
  std::string name_;
};

}  // namespace tpserve
