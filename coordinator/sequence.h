// One request as the engine tracks it. Owned by the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/time.h"
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
  // Tokens whose K/V the workers hold; catches up with tokens.size() each step it runs.
  int32_t num_computed = 0;
  std::vector<int32_t> block_ids;  // the block table; covers num_computed tokens and more
  bool known_to_workers = false;   // sent as a NewSequence under seq_id
  std::shared_ptr<RequestStream> stream;
  absl::Time arrival;

  int32_t num_generated() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
};

}  // namespace tpserve
