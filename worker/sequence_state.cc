#include "worker/sequence_state.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tpserve {
namespace {

absl::Status Bad(uint64_t seq_id, const char* field, double value, const char* rule) {
  return absl::InvalidArgumentError(
      absl::StrCat("new sequence ", seq_id, ": ", field, " = ", value, " ", rule));
}

}  // namespace

absl::StatusOr<SequenceState> MakeSequenceState(const v1::NewSequence& sequence,
                                                int64_t vocab_size) {
  const uint64_t id = sequence.seq_id();
  const v1::SamplingParams& p = sequence.sampling();
  if (!std::isfinite(p.temperature()) || p.temperature() < 0) {
    return Bad(id, "temperature", p.temperature(), "must be finite and >= 0");
  }
  if (p.top_k() < 0) return Bad(id, "top_k", p.top_k(), "must be >= 0");
  if (!(p.top_p() >= 0 && p.top_p() <= 1)) return Bad(id, "top_p", p.top_p(), "is outside [0, 1]");
  if (!(p.min_p() >= 0 && p.min_p() <= 1)) return Bad(id, "min_p", p.min_p(), "is outside [0, 1]");
  if (!std::isfinite(p.repetition_penalty()) || p.repetition_penalty() < 0) {
    return Bad(id, "repetition_penalty", p.repetition_penalty(), "must be finite and >= 0");
  }
  if (!std::isfinite(p.presence_penalty())) {
    return Bad(id, "presence_penalty", p.presence_penalty(), "must be finite");
  }
  if (!std::isfinite(p.frequency_penalty())) {
    return Bad(id, "frequency_penalty", p.frequency_penalty(), "must be finite");
  }
  if (sequence.top_logprobs() < 0 || sequence.top_logprobs() > kMaxTopLogprobs) {
    return Bad(id, "top_logprobs", sequence.top_logprobs(), "is outside [0, 20]");
  }
  SequenceState state;
  state.return_logprobs = sequence.return_logprobs();
  state.top_logprobs = sequence.top_logprobs();
  state.tokens.assign(sequence.prompt_token_ids().begin(), sequence.prompt_token_ids().end());
  state.prompt_len = static_cast<int64_t>(state.tokens.size());
  state.tokens.insert(state.tokens.end(), sequence.output_token_ids().begin(),
                      sequence.output_token_ids().end());
  for (int64_t i = 0; i < static_cast<int64_t>(state.tokens.size()); ++i) {
    if (state.tokens[i] < 0 || state.tokens[i] >= vocab_size) {
      const bool prompt = i < state.prompt_len;
      return absl::InvalidArgumentError(absl::StrCat(
          "new sequence ", id, ": ", prompt ? "prompt_token_ids[" : "output_token_ids[",
          prompt ? i : i - state.prompt_len, "] = ", state.tokens[i],
          " is outside the vocabulary of ", vocab_size));
    }
  }
  SamplerOptions options;
  options.sampling.temperature = p.temperature();
  options.sampling.top_k = p.top_k();
  options.sampling.top_p = p.top_p() == 0 ? 1.0f : p.top_p();
  options.sampling.min_p = p.min_p();
  options.repetition_penalty = p.repetition_penalty() == 0 ? 1.0f : p.repetition_penalty();
  options.presence_penalty = p.presence_penalty();
  options.frequency_penalty = p.frequency_penalty();
  options.seed = p.seed();
  state.sampler = std::make_unique<Sampler>(options);
  return state;
}

}  // namespace tpserve
