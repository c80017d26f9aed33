// Between logits and tokens (DESIGN.md): what the sampling rank (rank 0 of the last pipeline
// stage) does with the logits rows of one step, the same on every device. Per sequence, over its
// rows of the step's logits:
//   1. penalties over the sequence's history (repetition, frequency, presence; vLLM's order);
//   2. an optional allow-list bitmask per row (bit t of word t / 32 set: token t may follow);
//   3. either one sampled token (the last row), or the verification of K draft tokens over K+1
//      rows (VerifyDrafts below), or nothing but the raw rows back (Score).
// Log-probabilities are taken from the raw logits, before penalties, temperature and mask, as
// OpenAI and vLLM report them.
//
// LogitsProcessor is the seam: the CPU model runs CpuLogitsProcessor on host rows; a device model
// runs its own twin where its logits are, with the same results for greedy picks, masks and
// draft acceptance.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "kernels/sampling_params.h"

namespace tpserve {

inline constexpr int32_t kMaxTopLogprobs = 20;

// Words of a packed allow-list bitmask over `vocab` tokens.
inline int64_t BitmaskWords(int64_t vocab) { return (vocab + 31) / 32; }

// What to do with one sequence's rows [first_row, first_row + num_rows) of the step's logits.
// Every span must stay valid for the call that reads it.
struct LogitsRequest {
  int64_t first_row = 0;
  int64_t num_rows = 1;
  bool sample = false;                     // pick tokens from the rows (with drafts: verify them)
  bool return_logits = false;              // hand the raw rows back (Score)
  const SamplingParams* params = nullptr;  // required when sample
  // Output tokens before the first row's next token: row k draws from the stream of output
  // position output_len + k (SampleStreamSeed).
  int64_t output_len = 0;
  // The history the penalties count, token ids in [0, vocab): needed only when params has
  // penalties; `output` then has output_len tokens.
  absl::Span<const int32_t> prompt;
  absl::Span<const int32_t> output;
  // Empty, or [num_rows, BitmaskWords(vocab)]: row r's allow-list.
  absl::Span<const uint32_t> bitmask;
  // (token, bias) added to the rows' logits before penalties and mask (OpenAI's logit_bias).
  absl::Span<const std::pair<int32_t, float>> logit_bias;
  // K = num_rows - 1 draft tokens proposed after the row-0 position; empty for a plain sample.
  absl::Span<const int32_t> drafts;
  // Empty (each draft is a point mass: an n-gram guess), or [K, vocab]: the draft model's
  // probabilities q, each row summing to 1, that proposed drafts[k] from row k.
  absl::Span<const float> draft_probs;
  bool logprobs = false;     // return the log-probability of every returned token
  int32_t top_logprobs = 0;  // and this many most likely tokens at its position, [0, 20]
};

struct LogitsResult {
  // The accepted drafts, then one token sampled after them (the correction, or the bonus token
  // when all K were accepted). Empty without `sample`.
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;         // [tokens] with `logprobs`
  std::vector<int32_t> top_token_ids;  // [tokens, top_logprobs], most likely first
  std::vector<float> top_logprobs;     // [tokens, top_logprobs]
  std::vector<float> logits;           // [num_rows, vocab] with return_logits
};

// OK, or INVALID_ARGUMENT naming the field: rows outside the step's `num_rows`, a bitmask or
// draft_probs of the wrong length, a bitmask row that allows no token of the vocabulary, a
// draft outside the vocabulary, drafts without `sample`, a draft_probs row that is not a
// distribution, top_logprobs outside [0, kMaxTopLogprobs], `sample` without params.
absl::Status CheckLogitsRequest(const LogitsRequest& request, int64_t num_rows, int64_t vocab);

class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  // `logits`: the step's rows, [num_rows, vocab] in the device's memory. Requests were checked
  // with CheckLogitsRequest. One result per request, in order.
  virtual absl::Status Process(const float* logits, int64_t num_rows, int64_t vocab,
                               absl::Span<const LogitsRequest> requests,
                               std::vector<LogitsResult>* results) = 0;
};

class CpuLogitsProcessor final : public LogitsProcessor {
 public:
  absl::Status Process(const float* logits, int64_t num_rows, int64_t vocab,
                       absl::Span<const LogitsRequest> requests,
                       std::vector<LogitsResult>* results) override;

 private:
  std::vector<float> row_;     // [vocab] one row after penalties and mask
  std::vector<float> target_;  // [vocab] the target distribution p of that row
};

// The seed of the random stream that draws output token `output_len` of a sequence seeded by
// `seed`: every token, drafted or not, has its own stream, so the tokens a sequence samples do
// not depend on how they were batched, preempted or verified.
uint64_t SampleStreamSeed(uint64_t seed, size_t output_len);

// Applies the three penalties to `logits` in place, in vLLM's order: repetition, frequency,
// presence. Ids outside [0, vocab) are ignored.
void ApplyPenalties(const SamplingParams& params, absl::Span<const int32_t> prompt,
                    absl::Span<const int32_t> output, absl::Span<float> logits);

// Sets every token the bitmask row does not allow to -inf.
void ApplyBitmask(absl::Span<const uint32_t> mask, absl::Span<float> logits);

}  // namespace tpserve
