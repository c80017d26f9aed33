#include "kernels/cuda/cublaslt_library.h"

#include "absl/strings/str_cat.h"
#include "common/shared_library.h"

namespace tpserve::cuda {
namespace {

absl::StatusOr<CublasLtLibrary> Open() {
  // The soname carries the major version: an older or newer major is another ABI.
  const std::string name = absl::StrCat("libcublasLt.so.", CUBLAS_VER_MAJOR);
  absl::StatusOr<SharedLibrary> library =
      SharedLibrary::Open("cuBLASLt", "TPSERVE_CUBLASLT_LIBRARY", {name.c_str()});
  if (!library.ok()) return library.status();
  CublasLtLibrary table;
  absl::Status status;
#define TPSERVE_CUBLASLT_BIND(function) \
  if (status.ok()) status = library->Bind(#function, &table.function);
  TPSERVE_CUBLASLT_FUNCTIONS(TPSERVE_CUBLASLT_BIND)
#undef TPSERVE_CUBLASLT_BIND
  if (!status.ok()) return status;
  return table;
}

}  // namespace

absl::StatusOr<const CublasLtLibrary*> LoadCublasLt() {
  static const absl::StatusOr<CublasLtLibrary>* const loaded =
      new absl::StatusOr<CublasLtLibrary>(Open());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace tpserve::cuda
