#include "kernels/cuda/gemm.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/fp8_quantize.h"

namespace tpserve::cuda {
namespace {

uint32_t Alignment(const void* pointer) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  if (address == 0) return 256;
  const uintptr_t lowest_bit = address & (~address + 1);
  return lowest_bit >= 256 ? 256 : static_cast<uint32_t>(lowest_bit);
}

size_t ElementBytes(GemmOutputType type) { return type == GemmOutputType::kBf16 ? 2 : 4; }

std::string ShapeText(int64_t m, int64_t n, int64_t k) {
  return absl::StrCat("m=", m, " n=", n, " k=", k);
}

// OK for CUBLAS_STATUS_SUCCESS; otherwise "<what>: <cuBLAS's status string>" with
// FAILED_PRECONDITION for a library that could not initialize (no device or driver),
// RESOURCE_EXHAUSTED for allocation failures, INVALID_ARGUMENT for bad values, UNIMPLEMENTED for
// unsupported configurations and INTERNAL for the rest.
absl::Status CublasStatus(const CublasLtLibrary& lt, cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    case CUBLAS_STATUS_ALLOC_FAILED:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case CUBLAS_STATUS_INVALID_VALUE:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      code = absl::StatusCode::kUnimplemented;
      break;
    default:
      break;
  }
  return absl::Status(code, absl::StrCat(what, ": ", lt.cublasLtGetStatusString(status)));
}

}  // namespace

// cuBLASLt is column-major. Row-major c[m, n] is column-major cᵀ[n, m], and
//   cᵀ = b · aᵀ,  with row-major b[n, k] = column-major [k, n] (ld k) taken transposed,
//                 and row-major a[m, k] = column-major [k, m] (ld k) taken as is.
// That is cuBLAS's "TN" case, the layout its fastest bf16 kernels are written for.
struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t weight_layout = nullptr;      // cuBLAS's A: our b
  cublasLtMatrixLayout_t activation_layout = nullptr;  // cuBLAS's B: our a
  cublasLtMatrixLayout_t output_layout = nullptr;      // cuBLAS's C and D: our c
  cublasLtMatmulAlgo_t algo{};
  const CublasLtLibrary& lt;

  explicit Plan(const CublasLtLibrary& lt) : lt(lt) {}
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (output_layout != nullptr) lt.cublasLtMatrixLayoutDestroy(output_layout);
    if (activation_layout != nullptr) lt.cublasLtMatrixLayoutDestroy(activation_layout);
    if (weight_layout != nullptr) lt.cublasLtMatrixLayoutDestroy(weight_layout);
    if (desc != nullptr) lt.cublasLtMatmulDescDestroy(desc);
  }
};

namespace {

// Owns a heuristic preference for the length of GetPlan.
class Preference {
 public:
  explicit Preference(const CublasLtLibrary& lt) : lt_(lt) {}
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  ~Preference() {
    if (pref_ != nullptr) lt_.cublasLtMatmulPreferenceDestroy(pref_);
  }
  cublasLtMatmulPreference_t* out() { return &pref_; }
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  const CublasLtLibrary& lt_;
  cublasLtMatmulPreference_t pref_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Gemm>> Gemm::Create(size_t workspace_bytes) {
  ASSIGN_OR_RETURN(const CublasLtLibrary* lt, LoadCublasLt());
  // Creating the primary context first turns "no device" and "no driver" into a CUDA error with a
  // clear name, rather than a cuBLAS NOT_INITIALIZED.
  if (const cudaError_t error = cudaFree(nullptr); error != cudaSuccess) {
    cudaGetLastError();  // reported here; the next launch check must not blame its kernel
    return CudaStatus(error, "CUDA initialization for cuBLASLt");
  }
  void* workspace = nullptr;
  if (workspace_bytes > 0) {
    if (const cudaError_t error = cudaMalloc(&workspace, workspace_bytes); error != cudaSuccess) {
      cudaGetLastError();
      return CudaStatus(
          error, absl::StrCat("cudaMalloc of a ", workspace_bytes, "-byte cuBLASLt workspace"));
    }
  }
  cublasLtHandle_t handle = nullptr;
  const absl::Status created = CublasStatus(*lt, lt->cublasLtCreate(&handle), "cublasLtCreate");
  if (!created.ok()) {
    if (workspace != nullptr) cudaFree(workspace);
    return created;
  }
  return std::unique_ptr<Gemm>(new Gemm(*lt, handle, workspace, workspace_bytes));
}

Gemm::Gemm(const CublasLtLibrary& lt, cublasLtHandle_t handle, void* workspace,
           size_t workspace_bytes)
    : lt_(lt), handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

Gemm::~Gemm() {
  plans_.clear();  // descriptors before the handle they were made for
  // A failure here can only be a context already torn down at exit; nothing is left to free.
  lt_.cublasLtDestroy(handle_);
  if (workspace_ != nullptr) cudaFree(workspace_);
}

absl::Status Gemm::Supported(const GemmParams& p) {
  if (p.m < 0 || p.n < 0 || p.k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("bf16 GEMM: negative size (", ShapeText(p.m, p.n, p.k), ")"));
  }
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  if (p.c == nullptr || (p.k > 0 && (p.a == nullptr || p.b == nullptr))) {
    return absl::InvalidArgumentError(
        absl::StrCat("bf16 GEMM: a null operand (", ShapeText(p.m, p.n, p.k), ")"));
  }
  const uint32_t c_bytes = static_cast<uint32_t>(ElementBytes(p.c_type));
  if ((p.k > 0 && (Alignment(p.a) < 2 || Alignment(p.b) < 2)) || Alignment(p.c) < c_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bf16 GEMM: an operand is not aligned to its element size (a ", Alignment(p.a), ", b ",
        Alignment(p.b), ", c ", Alignment(p.c), " bytes; ", ShapeText(p.m, p.n, p.k), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Gemm::FastestCandidate(const Plan& plan,
                                           const cublasLtMatmulHeuristicResult_t* candidates,
                                           int count, const RunWith& run, cudaStream_t stream) {
  constexpr int kTimedRuns = 5;
  ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create(cudaEventDefault));
  ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create(cudaEventDefault));
  int best = -1;  // none timed yet
  float best_ms = 0.0f;
  for (int i = 0; i < count; ++i) {
    if (candidates[i].state != CUBLAS_STATUS_SUCCESS) continue;
    if (run(plan, candidates[i].algo) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up, and a check
    RETURN_IF_ERROR(start.Record(stream));
    for (int r = 0; r < kTimedRuns; ++r) run(plan, candidates[i].algo);
    RETURN_IF_ERROR(stop.Record(stream));
    RETURN_IF_ERROR(stop.Synchronize());
    ASSIGN_OR_RETURN(const float ms, CudaEvent::ElapsedMs(start, stop));
    if (best < 0 || ms < best_ms) {
      best = i;
      best_ms = ms;
    }
  }
  return best < 0 ? 0 : best;
}

absl::StatusOr<const Gemm::Plan*> Gemm::GetPlan(const PlanKey& key, const RunWith& run,
                                                cudaStream_t stream) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();

  auto plan = std::make_unique<Plan>(lt_);
  const cudaDataType_t c_type = key.c_type == GemmOutputType::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cudaDataType_t operand_type =
      key.operands == Operands::kBf16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
  const char* what = key.operands == Operands::kBf16 ? "bf16" : "FP8";
  RETURN_IF_ERROR(
      CublasStatus(lt_, lt_.cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                   "cublasLtMatmulDescCreate"));
  const cublasOperation_t transpose = CUBLAS_OP_T;
  const cublasOperation_t no_transpose = CUBLAS_OP_N;
  RETURN_IF_ERROR(
      CublasStatus(lt_,
                   lt_.cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                      &transpose, sizeof(transpose)),
                   "cublasLtMatmulDescSetAttribute(TRANSA)"));
  RETURN_IF_ERROR(
      CublasStatus(lt_,
                   lt_.cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                      &no_transpose, sizeof(no_transpose)),
                   "cublasLtMatmulDescSetAttribute(TRANSB)"));
  if (key.operands == Operands::kFp8OuterVector) {
    // cuBLAS's A is our b (its M = our n, one scale per output channel), its B our a (one per
    // token): the same two vectors in either naming.
    const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    for (const cublasLtMatmulDescAttributes_t mode :
         {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE}) {
      RETURN_IF_ERROR(CublasStatus(
          lt_, lt_.cublasLtMatmulDescSetAttribute(plan->desc, mode, &outer, sizeof(outer)),
          "cublasLtMatmulDescSetAttribute(SCALE_MODE)"));
    }
  }
  RETURN_IF_ERROR(CublasStatus(
      lt_, lt_.cublasLtMatrixLayoutCreate(&plan->weight_layout, operand_type, key.k, key.n, key.k),
      "cublasLtMatrixLayoutCreate(b)"));
  RETURN_IF_ERROR(CublasStatus(
      lt_,
      lt_.cublasLtMatrixLayoutCreate(&plan->activation_layout, operand_type, key.k, key.m, key.k),
      "cublasLtMatrixLayoutCreate(a)"));
  RETURN_IF_ERROR(CublasStatus(
      lt_, lt_.cublasLtMatrixLayoutCreate(&plan->output_layout, c_type, key.n, key.m, key.n),
      "cublasLtMatrixLayoutCreate(c)"));

  Preference preference(lt_);
  RETURN_IF_ERROR(CublasStatus(lt_, lt_.cublasLtMatmulPreferenceCreate(preference.out()),
                               "cublasLtMatmulPreferenceCreate"));
  const uint64_t max_workspace = workspace_bytes_;
  RETURN_IF_ERROR(CublasStatus(lt_,
                               lt_.cublasLtMatmulPreferenceSetAttribute(
                                   preference.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                   &max_workspace, sizeof(max_workspace)),
                               "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)"));
  // Split-K partial sums reduced in fp32 or not at all: reduced in place in a bf16 output, each
  // partial sum would be rounded to bf16 again, in whatever order its atomics land.
  const uint32_t reduction =
      CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  RETURN_IF_ERROR(CublasStatus(lt_,
                               lt_.cublasLtMatmulPreferenceSetAttribute(
                                   preference.get(), CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                   &reduction, sizeof(reduction)),
                               "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)"));
  // cuBLAS's A and B are our b and a; its C and D are both our c.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c},
  };
  for (const auto& [attribute, bytes] : alignments) {
    RETURN_IF_ERROR(CublasStatus(lt_,
                                 lt_.cublasLtMatmulPreferenceSetAttribute(
                                     preference.get(), attribute, &bytes, sizeof(bytes)),
                                 "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)"));
  }

  // Decode-sized products (m <= kTunedMaxM) try the heuristic's first kTunedCandidates on the
  // call's own operands: its ranking is a model, and for these memory-bound shapes it often
  // misses the fastest. Not while a graph is being captured (nothing would run), and not when
  // the call accumulates (each trial would add to c again).
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  const bool tune = run != nullptr && key.m <= kTunedMaxM &&
                    cudaStreamIsCapturing(stream, &capturing) == cudaSuccess &&
                    capturing == cudaStreamCaptureStatusNone;
  cublasLtMatmulHeuristicResult_t results[kTunedCandidates] = {};
  cublasLtMatmulHeuristicResult_t& result = results[0];
  int returned = 0;
  const cublasStatus_t heuristic = lt_.cublasLtMatmulAlgoGetHeuristic(
      handle_, plan->desc, plan->weight_layout, plan->activation_layout, plan->output_layout,
      plan->output_layout, preference.get(), tune ? kTunedCandidates : 1, results, &returned);
  if (heuristic != CUBLAS_STATUS_SUCCESS && heuristic != CUBLAS_STATUS_NOT_SUPPORTED) {
    return CublasStatus(lt_, heuristic, "cublasLtMatmulAlgoGetHeuristic");
  }
  if (heuristic == CUBLAS_STATUS_NOT_SUPPORTED || returned == 0 ||
      result.state != CUBLAS_STATUS_SUCCESS) {
    return absl::UnimplementedError(
        absl::StrCat("cuBLASLt has no ", what,
                     key.operands == Operands::kFp8OuterVector ? " (per-row scales)" : "",
                     " algorithm for ", ShapeText(key.m, key.n, key.k),
                     " with operand "
                     "alignments a ",
                     key.align_a, ", b ", key.align_b, ", c ", key.align_c, " bytes and a ",
                     workspace_bytes_, "-byte workspace"));
  }
  plan->algo = result.algo;
  if (tune && returned > 1) {
    ASSIGN_OR_RETURN(const int best, FastestCandidate(*plan, results, returned, run, stream));
    plan->algo = results[best].algo;
    ++tuned_plans_;
  }
  const Plan* stored = plan.get();
  plans_.emplace(key, std::move(plan));
  return stored;
}

absl::Status Gemm::Run(const GemmParams& p, cudaStream_t stream) {
  RETURN_IF_ERROR(Supported(p));
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  if (p.k == 0) {
    if (p.accumulate) return absl::OkStatus();
    return CudaStatus(cudaMemsetAsync(p.c, 0, p.m * p.n * ElementBytes(p.c_type), stream),
                      "cudaMemsetAsync of a k=0 GEMM output");
  }
  const PlanKey key{p.m, p.n, p.k, p.c_type, Alignment(p.a), Alignment(p.b), Alignment(p.c)};
  const float alpha = 1.0f;
  const float beta = p.accumulate ? 1.0f : 0.0f;
  const RunWith run = [&](const Plan& plan, const cublasLtMatmulAlgo_t& algo) {
    return lt_.cublasLtMatmul(handle_, plan.desc, &alpha, p.b, plan.weight_layout, p.a,
                              plan.activation_layout, &beta, p.c, plan.output_layout, p.c,
                              plan.output_layout, &algo, workspace_, workspace_bytes_, stream);
  };
  ASSIGN_OR_RETURN(const Plan* plan, GetPlan(key, p.accumulate ? RunWith() : run, stream));
  return CublasStatus(lt_, run(*plan, plan->algo), "cublasLtMatmul");
}

absl::StatusOr<Fp8ScaleMode> Gemm::ChooseFp8Mode(int64_t n, int64_t k, int64_t max_m) {
  if (n <= 0 || k <= 0 || max_m <= 0 || k % 16 != 0 || n % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FP8 GEMM needs k a multiple of 16 and n of 8 (cuBLASLt's FP8 operands and output rows "
        "are 16-byte aligned), not n=",
        n, " k=", k));
  }
  // cudaMalloc'd operands (256-byte aligned), at both ends of the token range. A cuBLASLt that
  // does not know the outer-vector mode rejects its attributes (INVALID_VALUE) rather than
  // offering no algorithm: both mean the epilogue.
  const auto plan = [&](int64_t m, bool outer) {
    const PlanKey key{m,   n,   k,   outer ? GemmOutputType::kBf16 : GemmOutputType::kFloat32,
                      256, 256, 256, outer ? Operands::kFp8OuterVector : Operands::kFp8Unscaled};
    return GetPlan(key, RunWith(), nullptr).status();
  };
  bool outer = true;
  for (const int64_t m : {int64_t{1}, max_m}) {
    const absl::Status status = plan(m, /*outer=*/true);
    if (status.ok()) continue;
    if (status.code() != absl::StatusCode::kUnimplemented &&
        status.code() != absl::StatusCode::kInvalidArgument) {
      return status;
    }
    outer = false;
    break;
  }
  if (outer) return Fp8ScaleMode::kOuterVector;
  for (const int64_t m : {int64_t{1}, max_m}) {
    const absl::Status status = plan(m, /*outer=*/false);
    if (status.code() == absl::StatusCode::kUnimplemented) {
      return absl::UnimplementedError(
          absl::StrCat("cuBLASLt offers no FP8 E4M3 product on this device (", status.message(),
                       "); FP8 weights need an sm_89 or later GPU"));
    }
    RETURN_IF_ERROR(status);
  }
  return Fp8ScaleMode::kEpilogue;
}

absl::Status Gemm::SupportedFp8(const Fp8GemmParams& p, Fp8ScaleMode mode) {
  const std::string shape = ShapeText(p.m, p.n, p.k);
  if (p.m < 0 || p.n < 0 || p.k < 0 || p.k % 16 != 0 || p.n % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FP8 GEMM: sizes must not be negative, k must be a multiple of 16 and n of 8 (", shape,
        ")"));
  }
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  if (p.c == nullptr || p.a_scales == nullptr || p.b_scales == nullptr ||
      (p.k > 0 && (p.a == nullptr || p.b == nullptr)) ||
      (mode == Fp8ScaleMode::kEpilogue && p.scratch == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("FP8 GEMM: a null operand (", shape, ")"));
  }
  if (Alignment(p.a) < 16 || Alignment(p.b) < 16 || Alignment(p.c) < 16 ||
      (p.scratch != nullptr && Alignment(p.scratch) < 16)) {
    return absl::InvalidArgumentError(absl::StrCat("FP8 GEMM: operands must be 16-byte aligned (a ",
                                                   Alignment(p.a), ", b ", Alignment(p.b), ", c ",
                                                   Alignment(p.c), " bytes; ", shape, ")"));
  }
  return absl::OkStatus();
}

absl::Status Gemm::RunFp8(const Fp8GemmParams& p, Fp8ScaleMode mode, cudaStream_t stream) {
  RETURN_IF_ERROR(SupportedFp8(p, mode));
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  if (p.k == 0) {
    return CudaStatus(cudaMemsetAsync(p.c, 0, p.m * p.n * sizeof(bf16), stream),
                      "cudaMemsetAsync of a k=0 GEMM output");
  }
  const bool outer = mode == Fp8ScaleMode::kOuterVector;
  void* d = outer ? static_cast<void*>(p.c) : static_cast<void*>(p.scratch);
  const PlanKey key{p.m,
                    p.n,
                    p.k,
                    outer ? GemmOutputType::kBf16 : GemmOutputType::kFloat32,
                    Alignment(p.a),
                    Alignment(p.b),
                    Alignment(d),
                    outer ? Operands::kFp8OuterVector : Operands::kFp8Unscaled};
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const RunWith run = [&](const Plan& plan, const cublasLtMatmulAlgo_t& algo) {
    if (outer) {
      // This call's scale vectors on the plan's descriptor: pointers, not values, so setting
      // them is a host-side write, allowed during graph capture (the launch keeps its own copy).
      const std::pair<cublasLtMatmulDescAttributes_t, const float*> scales[] = {
          {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, p.b_scales},
          {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, p.a_scales},
      };
      for (const auto& [attribute, pointer] : scales) {
        const cublasStatus_t set =
            lt_.cublasLtMatmulDescSetAttribute(plan.desc, attribute, &pointer, sizeof(pointer));
        if (set != CUBLAS_STATUS_SUCCESS) return set;
      }
    }
    return lt_.cublasLtMatmul(handle_, plan.desc, &alpha, p.b, plan.weight_layout, p.a,
                              plan.activation_layout, &beta, d, plan.output_layout, d,
                              plan.output_layout, &algo, workspace_, workspace_bytes_, stream);
  };
  ASSIGN_OR_RETURN(const Plan* plan, GetPlan(key, run, stream));
  RETURN_IF_ERROR(CublasStatus(lt_, run(*plan, plan->algo), "cublasLtMatmul (FP8)"));
  if (!outer) ScaleOuterToBf16(p.scratch, p.a_scales, p.b_scales, p.m, p.n, p.c, stream);
  return absl::OkStatus();
}

absl::Status Gemm::MatmulBT(const bf16* a, const bf16* b, int64_t m, int64_t n, int64_t k, bf16* c,
                            cudaStream_t stream, bool accumulate) {
  return Run(GemmParams{a, b, c, GemmOutputType::kBf16, m, n, k, accumulate}, stream);
}

absl::Status Gemm::MatmulBT(const bf16* a, const bf16* b, int64_t m, int64_t n, int64_t k, float* c,
                            cudaStream_t stream, bool accumulate) {
  return Run(GemmParams{a, b, c, GemmOutputType::kFloat32, m, n, k, accumulate}, stream);
}

}  // namespace tpserve::cuda
