// cuBLASLt's functions, taken from the library at run time (common/shared_library.h says why).
// Each member is named and typed as the function it holds, so a call reads
// `lt.cublasLtMatmul(...)`.
#pragma once

#include <cublasLt.h>

#include "absl/status/statusor.h"

namespace tpserve::cuda {

#define TPSERVE_CUBLASLT_FUNCTIONS(X)                                                            \
  X(cublasLtCreate)                                                                              \
  X(cublasLtDestroy) X(cublasLtGetStatusString) X(cublasLtMatmul)                                \
      X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) \
          X(cublasLtMatmulDescSetAttribute) X(cublasLtMatmulPreferenceCreate)                    \
              X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)         \
                  X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)

struct CublasLtLibrary {
#define TPSERVE_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  TPSERVE_CUBLASLT_FUNCTIONS(TPSERVE_CUBLASLT_MEMBER)
#undef TPSERVE_CUBLASLT_MEMBER
};

// Opens libcublasLt.so.<the CUDA major version built against> (or the file
// $TPSERVE_CUBLASLT_LIBRARY names) at the first call (thread-safe) and returns the same table
// afterwards; NOT_FOUND naming the library, on every call, when it cannot be loaded.
absl::StatusOr<const CublasLtLibrary*> LoadCublasLt();

}  // namespace tpserve::cuda
