// One request as the engine tracks it. Owned by the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/adapter_gate.h"
#include "coordinator/grammar.h"
#include "coordinator/output_constraint.h"
#include "coordinator/prefix_cache.h"
#include "coordinator/request_handle.h"
#include "coordinator/request_limits.h"
#include "coordinator/token_text.h"
#include "kernels/sampling_params.h"

namespace tpserve {

// A generation request (see Engine::SubmitGenerate for the checks).
struct GenerateParams {
  std::vector<int32_t> prompt;  // token ids
  int32_t max_tokens = 0;       // 0: until the context length
  SamplingParams sampling;      // sent to the workers as is; sample i of n uses seed + i
  bool ignore_eos = false;
  bool speculate = true;  // false: no proposals for this request (Scheduler::Proposals)
  std::vector<int32_t> stop_token_ids;
  // Generation ends when the text contains one of these (matched across token boundaries); the
  // stop string and what follows it are not returned.
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;  // a matched stop string ends the text, included
  // Before this many tokens no end of generation, no stop token id and no stop string ends the
  // output (the first two are masked out of the draw).
  int32_t min_tokens = 0;
  bool skip_special_tokens = true;         // control tokens leave no text (vLLM's default)
  std::vector<int32_t> allowed_token_ids;  // empty: any token; else the only ones drawn
  // (token, bias in [-100, 100]) added to the logits before the draw (OpenAI's logit_bias).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Token sequences never generated: the last token of each is masked where the output ends with
  // the others (vLLM's bad_words).
  std::vector<std::vector<int32_t>> bad_words_ids;
  int32_t n = 1;  // independent samples of the same prompt, in [1, RequestLimits::max_n]
  // -1: none. k in [0, kMaxLogprobs]: each token's log-probability under the model's raw logits
  // (before temperature and penalties), and the k most likely tokens at that position.
  int32_t logprobs = -1;
  // Structured output: what the text must match (none by default), and its compiled form, which
  // Engine::SubmitGenerate fills.
  OutputConstraint constraint;
  std::shared_ptr<const CompiledConstraint> compiled_constraint;
  // The LoRA adapter the request runs with: its slot on the workers (coordinator/lora_modules.h);
  // 0 is the base model. The slot must still hold the adapter of this generation at admission
  // (AdapterGate).
  int32_t adapter = 0;
  int64_t adapter_generation = 0;
};

// The n samples of one request. Samples after the first wait until the first has computed the
// prompt, so that they take its blocks from the prefix cache instead of computing it again.
struct SampleGroup {
  bool prompt_cached = false;  // the first sample's prompt is computed (or it has left)
};

struct Sequence {
  enum class Kind { kGenerate, kScore };

  uint64_t request_id = 0;  // stable, for logs and the client
  uint64_t seq_id = 0;      // the workers' id; a fresh one after preemption
  Kind kind = Kind::kGenerate;
  GenerateParams params;
  std::vector<int32_t> tokens;  // prompt then generated tokens
  int32_t prompt_len = 0;
  // Tokens whose K/V the workers hold (computed or taken from the prefix cache); catches up
  // with tokens.size() over one or more steps (chunked prefill), then runs one token per step.
  int32_t num_computed = 0;
  // The block table; the sequence holds one BlockPool reference on each. Covers num_computed
  // tokens and possibly more.
  std::vector<int32_t> block_ids;
  bool known_to_workers = false;  // sent as a NewSequence under seq_id
  // In a step sent and not yet returned: with several steps in flight (pipeline stages), it runs
  // in no other step until then, and keeps its blocks (no preemption, no cancellation) meanwhile.
  bool in_flight = false;
  // Prefix cache: the node this sequence locks (covers block_ids[0, num_cached_blocks)) or null.
  PrefixCache::Node* cache_node = nullptr;
  int32_t num_cached_blocks = 0;
  int32_t cached_prompt_tokens = -1;   // taken from the cache at first admission; -1 before
  std::vector<float> score_logits;     // Score: rows received so far, [rows, vocab]
  std::shared_ptr<SampleGroup> group;  // n > 1 only
  bool group_leader = false;           // the sample the others wait for
  // Where this sample's tokens and outcome go, under index `sample`.
  std::shared_ptr<RequestHandle> handle;
  int32_t sample = 0;
  // Generate: the text of the generated tokens (the engine's OutputProcessor); null: tokens
  // without text.
  std::unique_ptr<TokenText> output;
  // Structured output: where the sample stands in its constraint; null when unconstrained.
  std::unique_ptr<TokenMatcher> token_matcher;
  // The allow-list of the next sampled token (UpdateSampleMask), [ceil(vocab / 32)] words; empty:
  // any token. A sample with one neither speculates nor is verified over drafts.
  std::vector<uint32_t> mask;
  // Speculative decoding with a draft model: what rank 0's draft proposed after the last step, to
  // be verified in the next (cleared by a preemption: the workers forget the draft's state).
  std::vector<int32_t> proposals;
  // The draft did not run this sequence's last sampling step: following it again would run its
  // whole context through the draft, so it proposes no more until it is admitted again (a fresh
  // seq_id, a fresh draft state).
  bool draft_behind = false;
  // Speculation adapts per request: the proposals a step may carry (one more after a step that
  // accepted all it verified, one fewer after one that did not; 0 for good once the acceptance
  // fell below SchedulerOptions::spec_min_acceptance; -1: num_speculative_tokens, not yet
  // adapted), and the tokens proposed and accepted so far.
  int32_t spec_k = -1;
  // Blocks beyond what the next step surely runs were freed after a verification that rejected
  // drafts (Scheduler::FreeRejectedBlocks): the workers' table still lists them until the next
  // step tells them to keep this many (-1: nothing to tell).
  int32_t kept_blocks = -1;
  int64_t spec_proposed = 0;
  int64_t spec_accepted = 0;
  std::optional<FinishReason> finish_reason;  // set when generation ends, told to the stream last
  absl::Time arrival;
  absl::Time first_scheduled = absl::InfinitePast();  // InfinitePast: not yet
  absl::Time last_token = absl::InfinitePast();       // InfinitePast: no token yet
  // Held while the cluster re-forms after a lost rank (Engine), since then; InfinitePast: not.
  absl::Time held_since = absl::InfinitePast();
  // Steps that failed while this sequence ran (each one held it): past
  // EngineOptions::max_request_holds it fails instead of being held again.
  int32_t holds = 0;
  // Counts this sequence against its adapter's slot until it is gone (AdapterGate).
  AdapterUse adapter_use;

  int32_t num_generated() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
};

}  // namespace tpserve
