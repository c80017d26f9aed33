// bf16 matrix product against a weight stored as rows, through cuBLASLt (CUDA). The GPU twin of
// kernels/cpu/gemm.h: the same operand layout, bf16 operands instead of fp32. Also the FP8 W8A8
// product of kernels/cpu/fp8_matmul.h (E4M3 codes with per-row scales).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cublaslt_library.h"

namespace tpserve::cuda {

enum class GemmOutputType { kBf16, kFloat32 };

// c = a · bᵀ            (accumulate == false; c is not read, so it may hold garbage or NaN)
// c = c + a · bᵀ        (accumulate == true)
// Products and sums in fp32; c is rounded to its type at the end: once, except that with
// accumulate into bf16 cuBLASLt rounds a · bᵀ to bf16 before adding c (seen on an H200, where
// torch.addmm matches (a @ b.T) + c bit for bit too), so twice there.
struct GemmParams {
  const bf16* a = nullptr;  // [m, k] row-major activations, device
  const bf16* b = nullptr;  // [n, k] row-major weight [out_features, in_features], device
  void* c = nullptr;        // [m, n] row-major of c_type, device; must not overlap a or b
  GemmOutputType c_type = GemmOutputType::kBf16;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool accumulate = false;
};

// FP8 W8A8, as cpu::MatmulE4m3BT defines it, rounded to bf16 once:
//   c[i, j] = bf16(a_scales[i] * b_scales[j] * sum_k E4M3(a[i, k]) * E4M3(b[j, k]))
// Products of codes are exact in fp32 and sums run in fp32 (no FP8 "fast accumulation").
struct Fp8GemmParams {
  const uint8_t* a = nullptr;       // [m, k] activation codes (QuantizeRowsE4m3), device
  const float* a_scales = nullptr;  // [m] per token
  const uint8_t* b = nullptr;       // [n, k] weight codes, rows = output channels
  const float* b_scales = nullptr;  // [n] per output channel
  bf16* c = nullptr;                // [m, n] row-major; must not overlap the others
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  float* scratch = nullptr;  // Fp8ScaleMode::kEpilogue only: [m, n] fp32 for the raw product
};

// How the per-row scales enter an FP8 product. kOuterVector: cuBLASLt applies them itself
// (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, offered on sm_90 by CUDA 12.9 and later) and writes
// bf16. kEpilogue: cuBLASLt computes the unscaled product in fp32 and ScaleOuterToBf16 applies
// them (the same values, one more pass over m x n fp32).
enum class Fp8ScaleMode { kOuterVector, kEpilogue };

// Runs GemmParams through cuBLASLt with the algorithm its heuristic ranks first for the shape.
//
// The first call for a (m, n, k, output type, operand alignment) builds a plan (descriptors plus
// an algorithm) and keeps it; later calls only enqueue the matmul. Decode runs the same few
// shapes every step, and the heuristic query costs far more than the launch. For decode-sized
// products (m <= kTunedMaxM) that first call times the heuristic's first kTunedCandidates
// algorithms on its own operands and keeps the fastest; the CUDA model makes those first calls
// at load, in the eager pass before each decode graph is captured.
//
// Threads: not thread-safe (the plan cache is unguarded); the worker's execution thread owns it.
// Every call uses the one workspace, so calls must not run concurrently on different streams:
// use one stream, or order the streams.
class Gemm {
 public:
  // cuBLASLt's guidance for Hopper: 32 MiB lets split-K and stream-K kernels run.
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;

  // A handle and a workspace on the current device. NOT_FOUND when cuBLASLt cannot be loaded,
  // FAILED_PRECONDITION without a usable device, RESOURCE_EXHAUSTED when the workspace does not
  // fit.
  static absl::StatusOr<std::unique_ptr<Gemm>> Create(
      size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // OK when Run can take these parameters; INVALID_ARGUMENT naming the problem otherwise: a
  // negative size, a missing operand, or one not aligned to its element size. Any shape is
  // supported; operands and row strides aligned to 16 bytes (k and n multiples of 8) get the
  // fastest kernels. Reads no device memory.
  static absl::Status Supported(const GemmParams& params);

  // Enqueues the product on `stream` and returns; errors as Supported, or UNIMPLEMENTED when
  // cuBLASLt has no algorithm for the shape, or cuBLAS's error for the launch. Zero m or n is a
  // no-op; zero k writes zeros (or leaves c as it is, when accumulating).
  absl::Status Run(const GemmParams& params, cudaStream_t stream);

  // The CPU MatmulBT signature, plus the stream.
  absl::Status MatmulBT(const bf16* a, const bf16* b, int64_t m, int64_t n, int64_t k, bf16* c,
                        cudaStream_t stream, bool accumulate = false);
  absl::Status MatmulBT(const bf16* a, const bf16* b, int64_t m, int64_t n, int64_t k, float* c,
                        cudaStream_t stream, bool accumulate = false);

  // Which Fp8ScaleMode this device and library offer for weights of [n, k] and 1 to max_m
  // tokens: kOuterVector when cuBLASLt has algorithms for it at both ends (a library that does not
  // know the mode rejects it: also kEpilogue), else kEpilogue when it has them for the unscaled
  // product; UNIMPLEMENTED naming the shape when it has neither (FP8 tensor cores need sm_89 or
  // later); INVALID_ARGUMENT unless k is a multiple of 16 and n of 8. Ask once per weight shape at
  // load; the plans it builds are kept.
  absl::StatusOr<Fp8ScaleMode> ChooseFp8Mode(int64_t n, int64_t k, int64_t max_m);
  // OK when RunFp8 can take these parameters: k a multiple of 16, n of 8 and operands 16-byte
  // aligned (cuBLASLt's FP8 rules), scales present, scratch present for kEpilogue;
  // INVALID_ARGUMENT naming the problem otherwise.
  static absl::Status SupportedFp8(const Fp8GemmParams& params, Fp8ScaleMode mode);
  // Enqueues the FP8 product on `stream`; errors as SupportedFp8, UNIMPLEMENTED when cuBLASLt has
  // no algorithm, cuBLAS's error for the launch.
  absl::Status RunFp8(const Fp8GemmParams& params, Fp8ScaleMode mode, cudaStream_t stream);

  // Plans built so far (one per distinct shape and alignment seen), and of those the ones whose
  // algorithm was timed among the heuristic's first candidates (m <= kTunedMaxM).
  size_t cached_plans() const { return plans_.size(); }
  size_t tuned_plans() const { return tuned_plans_; }

  static constexpr int64_t kTunedMaxM = 8;
  static constexpr int kTunedCandidates = 8;

 private:
  // What a plan multiplies: bf16 operands, or E4M3 codes with the scales of an Fp8ScaleMode.
  enum class Operands { kBf16, kFp8OuterVector, kFp8Unscaled };
  struct PlanKey {
    int64_t m, n, k;
    GemmOutputType c_type;
    // Largest power of two (at most 256) dividing each operand's address: the heuristic may only
    // pick kernels whose vector loads these alignments allow.
    uint32_t align_a, align_b, align_c;
    Operands operands = Operands::kBf16;

    bool operator==(const PlanKey&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const PlanKey& key) {
      return H::combine(std::move(h), key.m, key.n, key.k, key.c_type, key.operands, key.align_a,
                        key.align_b, key.align_c);
    }
  };
  struct Plan;

  // Runs the product of the call being planned with `algo` (on the call's operands and stream).
  using RunWith = std::function<cublasStatus_t(const Plan&, const cublasLtMatmulAlgo_t&)>;

  Gemm(const CublasLtLibrary& lt, cublasLtHandle_t handle, void* workspace, size_t workspace_bytes);
  // The key's plan, built at its first call: the heuristic's first algorithm, or for m <=
  // kTunedMaxM with `run` given the fastest of its first kTunedCandidates, timed through `run`
  // on `stream` (skipped while `stream` is capturing a graph).
  absl::StatusOr<const Plan*> GetPlan(const PlanKey& key, const RunWith& run, cudaStream_t stream);
  // Index of the candidate whose kTimedRuns runs took least time.
  absl::StatusOr<int> FastestCandidate(const Plan& plan,
                                       const cublasLtMatmulHeuristicResult_t* candidates, int count,
                                       const RunWith& run, cudaStream_t stream);

  // Constant after construction.
  const CublasLtLibrary& lt_;
  cublasLtHandle_t handle_ = nullptr;  // owned; tied to the device current at Create
  void* workspace_ = nullptr;          // device, owned
  size_t workspace_bytes_ = 0;

  absl::flat_hash_map<PlanKey, std::unique_ptr<Plan>> plans_;
  size_t tuned_plans_ = 0;
};

}  // namespace tpserve::cuda
