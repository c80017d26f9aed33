// One request as the engine tracks it. Owned by the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/radix_cache.h"
#include "coordinator/request_stream.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

// A validated generation request (see Engine::SubmitGenerate for the checks).
struct GenerateParams {
  std::vector<int32_t> prompt;  // token ids
  int32_t max_tokens = 0;       // 0: until the context length
  v1::SamplingParams sampling;  // sent to the workers as is
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
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
  // Prefix cache: the node this sequence locks (covers block_ids[0, num_cached_blocks)) or null.
  RadixCache::Node* cache_node = nullptr;
  int32_t num_cached_blocks = 0;
  int32_t cached_prompt_tokens = -1;  // taken from the cache at first admission; -1 before
  std::vector<float> score_logits;    // Score: rows received so far, [rows, vocab]
  std::shared_ptr<RequestStream> stream;
  absl::Time arrival;

  int32_t num_generated() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
};

}  // namespace tpserve
