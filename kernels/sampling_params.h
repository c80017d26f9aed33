// The one sampling-parameter type: what a client asks for, what the engine keeps per request,
// what the workers sample with, on both devices. It lives beside the kernels because kernels/
// depends on nothing else of ours, and everything else depends on kernels/.
//
// The ranges, enforced by Validate() at every edge (public gRPC, OpenAI HTTP, the worker's
// NewSequence), and the same in the README:
//
//   field               default   valid                 off
//   temperature         1         [0, FLT_MAX]          0 = greedy (argmax)
//   top_k               0         >= 0                  0
//   top_p               1         (0, 1]                1
//   min_p               0         [0, 1]                0
//   repetition_penalty  1         [0.01, 100]           1
//   presence_penalty    0         [-2, 2]               0
//   frequency_penalty   0         [-2, 2]               0
//   seed                random    any uint64
//
// The penalty bounds keep penalized logits finite (a logit divided by 1e-40 would be +inf).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"

namespace tpserve {

struct SamplingParams {
  float temperature = 1.0f;
  int32_t top_k = 0;   // keep the k most likely tokens
  float top_p = 1.0f;  // keep the smallest most-likely set with probability >= top_p
  float min_p = 0.0f;  // drop tokens with p < min_p * p_max
  // Tokens seen in the prompt or the output: positive logits are divided by it, negative ones
  // multiplied (vLLM's semantics, as the two below).
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;   // subtracted once from every token present in the output
  float frequency_penalty = 0.0f;  // subtracted once per occurrence in the output
  // The draw for output token k comes from a stream seeded by (seed, k), so a sequence that is
  // preempted and recomputed samples exactly what it would have sampled without preemption.
  uint64_t seed = 0;

  // The first field outside its range, as (field name, "top_p = 0 is outside (0, 1]"), or
  // nullopt when every field is valid.
  struct FieldError {
    const char* field;
    std::string message;
  };
  std::optional<FieldError> FirstInvalidField() const;
  // INVALID_ARGUMENT with FirstInvalidField's message, or OK.
  absl::Status Validate() const;

  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

// A seed for a request that named none, from a per-thread random source.
uint64_t RandomSamplingSeed();

}  // namespace tpserve
