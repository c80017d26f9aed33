// The StepRequest (proto) → ForwardBatch conversion, and the way back from logits to the
// StepResponse's outputs. Semantics of the fields (see worker.proto):
// - finished_seq_ids and new_sequences are applied by the caller before BuildForwardBatch.
// - ScheduledSequence: `new_block_ids` are appended to the sequence's block table, which must
//   then cover positions [0, start_position + len(token_ids)). The first time a sequence is
//   scheduled, start_position may be anywhere in [0, known tokens] (a cached prefix); after that
//   it must equal the positions already computed.
// - Every scheduled sequence yields logits for its last token, or for every token with
//   `all_logits`. Rank 0 answers one SequenceOutput per sequence with `sample` or `all_logits`,
//   in request order: token_id is the sampled token (-1 without `sample`), logits the rows
//   [len(token_ids), vocab] (empty without `all_logits`).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/forward_batch.h"
#include "worker/sequence_state.h"

namespace tpserve {

// What the loaded shard can run.
struct BatchLimits {
  int64_t block_size = 16;
  int64_t num_blocks = 0;  // KV pool size
  int64_t vocab_size = 0;
  int64_t context_length = 0;
};

// A validated step: the forward batch and, per scheduled sequence, where its logits start and
// its block table once the step has run.
struct StepPlan {
  ForwardBatch batch;
  std::vector<int64_t> first_logits_row;           // [scheduled]
  std::vector<std::vector<int32_t>> block_tables;  // [scheduled] after new_block_ids
};

// Builds the step's forward batch. `sequences` must already hold this step's new sequences and no
// longer its finished ones; it is not modified. INVALID_ARGUMENT naming the sequence and field for
// an unknown or twice-scheduled seq id, empty token_ids, a token or block id out of range, a
// start_position that does not follow the computed positions, a block table too short for the
// positions, or positions past the context length.
absl::StatusOr<StepPlan> BuildForwardBatch(const v1::StepRequest& request,
                                           const SequenceMap& sequences, const BatchLimits& limits);

// After a successful forward pass: records each scheduled sequence's blocks, run tokens and
// computed positions.
void CommitStep(const v1::StepRequest& request, StepPlan& plan, SequenceMap* sequences);

// Rank 0, after CommitStep: appends the outputs described above to `response`, sampling with
// each sequence's Sampler. `logits`: [plan.batch.num_logits(), vocab_size].
void WriteStepOutputs(const v1::StepRequest& request, const StepPlan& plan,
                      absl::Span<const float> logits, int64_t vocab_size, SequenceMap* sequences,
                      v1::StepResponse* response);

}  // namespace tpserve
