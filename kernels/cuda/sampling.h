// Next-token selection for a batch of sequences (CUDA): gather each sequence's logits row, then
// pick greedily or sample. The GPU twin of kernels/cpu/sampling.h, one row per sequence.
//
// Semantics are the CPU's (same filters, same order, same tie-breaking by lower token id), except:
//  - Randomness: Philox4x32-10 (kernels/cuda/philox.h), not std::mt19937_64. The draw for a row
//    is a pure function of (logits row, settings, seed, draw_index): the same token for the same
//    inputs on the same device and build, wherever the row sits in the batch. Unless the row
//    brings its own uniform number (SequenceSampling::uniform: the CPU's draw, computed on the
//    host), the CPU and GPU draw from the same distribution but not the same tokens; with it,
//    the same token but where rounding moves a cut (below).
//  - Weights exp((logit - max) / temperature) use CUDA's expf (within 2 ulp of glibc's) and are
//    summed as integers in units of 2^-40 of the most likely token's weight, so sums are exact and
//    independent of thread order. Tokens with p < 2^-40 · p_max are never drawn (on the CPU they
//    are, with total probability below vocab · 2^-40). top-p compares these integer sums, where
//    the CPU sums doubles in sorted order: a token whose cumulative mass lies within about 1e-7
//    of top_p · mass may fall on the other side of the cut.
//  - Among the kept tokens the draw walks them in id order, as the CPU does. The cumulative
//    weights differ from the CPU's by expf's rounding and the 2^-40 truncation (about 1e-7 of
//    the mass each): a uniform number that falls that close to a boundary between two tokens
//    picks the neighbour.
//  - NaN logits count as -inf (on the CPU a NaN at index 0 wins Argmax).
//  - Settings are not checked: a value outside the CPU's contract (negative or NaN temperature,
//    top_k < 0, top_p outside (0, 1], min_p outside [0, 1]) turns that filter off (temperature:
//    greedy) instead of aborting.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/sampling_params.h"

namespace tpserve::cuda {

enum class LogitsType { kFloat32, kBf16 };

// out[s, :] = float(logits[rows[s], :]): the rows that carry each sequence's next-token logits.
struct GatherLogitsParams {
  const void* logits = nullptr;  // [num_tokens, vocab] of logits_type, device
  LogitsType logits_type = LogitsType::kFloat32;
  const int32_t* rows = nullptr;  // [num_seqs], device; each in [0, num_tokens) (a row outside
                                  // traps the kernel: it is the worker's bug, not a client's)
  float* out = nullptr;           // [num_seqs, vocab], device; must not overlap logits
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t vocab = 0;
};

// One sequence's settings, in device memory, one per row: SamplingParams' filters (not its
// penalties, which are applied before), and where the draw's randomness comes from.
struct SequenceSampling {
  float temperature = 0.0f;  // < 1e-5 (or NaN): greedy
  int32_t top_k = 0;         // 0 or >= vocab: off; 1: greedy
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;         // the request's seed
  uint64_t draw_index = 0;   // tokens already sampled for this request (one draw per token)
  // In [0, 1): the draw's uniform number, which picks the first kept token (in id order) whose
  // cumulative mass exceeds uniform times the kept mass, as cpu::Sample; negative: the bits of
  // Philox(seed, draw_index) instead.
  double uniform = -1.0;
};

// The row for `params`' filters and seed, drawing from Philox(seed, draw_index).
SequenceSampling ToSequenceSampling(const SamplingParams& params, uint64_t draw_index);

struct ArgmaxParams {
  const float* logits = nullptr;  // [num_seqs, vocab], device
  int32_t* out = nullptr;         // [num_seqs], device
  int64_t num_seqs = 0;
  int64_t vocab = 0;
};

struct SampleParams {
  const float* logits = nullptr;                // [num_seqs, vocab], device
  const SequenceSampling* sequences = nullptr;  // [num_seqs], device
  int32_t* out = nullptr;                       // [num_seqs] token ids, device
  int64_t num_seqs = 0;
  int64_t vocab = 0;
};

// OK, or INVALID_ARGUMENT naming the problem: a negative count, vocab outside [1, 2^23]
// (fixed-point sums must fit 64 bits; Llama 3 has 128,256), a null pointer where num_seqs > 0, or
// no token rows to gather from.
absl::Status GatherLogitsSupported(const GatherLogitsParams& params);
absl::Status ArgmaxSupported(const ArgmaxParams& params);
absl::Status SampleSupported(const SampleParams& params);

// Each enqueues one kernel on `stream` and returns: the Supported error, the launch error, or OK.
// num_seqs == 0 launches nothing.
absl::Status GatherLogits(const GatherLogitsParams& params, cudaStream_t stream);

// out[s] = the index of the largest logit of row s, the lowest index on ties (cpu::Argmax).
absl::Status Argmax(const ArgmaxParams& params, cudaStream_t stream);

// out[s] = a token drawn from softmax(logits[s] / temperature) restricted by top-k, then top-p
// (on the renormalized top-k distribution), then min-p, as cpu::Sample; greedy in the same cases
// (temperature < 1e-5, top_k == 1, a maximum logit that is not finite).
// Cost per row: one block; a pass over the row for the maximum, one for the mass, up to 8 radix
// passes each for top-k and top-p (usually 3 to 4: fewer when logits are distinct), and one to
// draw. Memory: none beyond the arguments.
absl::Status Sample(const SampleParams& params, cudaStream_t stream);

}  // namespace tpserve::cuda
