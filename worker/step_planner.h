// StepPlanner: what every rank knows about the running sequences, and the checks a StepRequest
// passes before any rank touches its model (DESIGN.md "Worker protocol"; the field semantics are
// in worker.proto). ModelRunner runs the plan on the model; the fuzz target fuzz/step_fuzz.cc runs
// the same planner with no model, which is why it depends on sizes rather than on a loaded model.
//
// Finished sequences are dropped whatever happens next; the rest is all or nothing: a refused
// step (INVALID_ARGUMENT naming the sequence and field) adds no sequence and changes no state.
//
// Not thread-safe: the worker's execution thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/forward_batch.h"
#include "worker/kv_cache.h"
#include "worker/logits_processor.h"
#include "worker/sequence_state.h"

namespace tpserve {

// A step refused because of one sequence's data (INVALID_ARGUMENT) names it in this payload, so
// that the coordinator fails that sequence alone (StepResponse.refused).
inline constexpr char kRefusedSequencePayload[] = "tpserve.refused_seq_id";
// The most logit biases one sequence may carry (NewSequence.logit_bias_ids).
inline constexpr int32_t kMaxLogitBias = 1024;
absl::Status RefuseSequence(uint64_t seq_id, absl::string_view message);
// The sequence a refusal names; nullopt for any other status.
std::optional<uint64_t> RefusedSequenceId(const absl::Status& status);

class StepPlanner {
 public:
  // A validated step: the forward batch, one logits request per scheduled sequence, and each
  // scheduled sequence's block table once the step has run.
  struct Plan {
    ForwardBatch batch;
    std::vector<LogitsRequest> logits;               // [scheduled]
    std::vector<std::vector<int32_t>> block_tables;  // [scheduled]
    // Rank 0, per sampled sequence with penalties: prompt and output up to this step's tokens.
    std::vector<std::vector<int32_t>> histories;
    std::vector<uint64_t> added;  // new_sequences of this step, forgotten by Abandon
  };

  // `vocab_size` and `context_length` are the model's, `kv` this rank's pool. Only the rank that
  // `samples` (rank 0 of the last pipeline stage) builds the penalties' histories. A new
  // sequence's adapter is a slot in [0, num_lora_slots].
  StepPlanner(int64_t vocab_size, int64_t context_length, const KvCacheShape& kv, bool samples,
              int32_t num_lora_slots = 0);

  // Drops the finished sequences, adds the new ones and plans the scheduled ones. A request that
  // schedules nothing gives a plan with an empty batch (its new sequences stay). The plan's
  // logits requests point into `request` and into this planner's state: both must stay unchanged
  // until Commit or Abandon.
  absl::StatusOr<Plan> Begin(const v1::StepRequest& request);
  // After the forward pass: blocks, run tokens and computed positions of every scheduled
  // sequence; a sequence with drafts keeps only the positions of its accepted ones.
  void Commit(const v1::StepRequest& request, Plan& plan);
  // The model refused the planned step: forget the sequences it added.
  void Abandon(const Plan& plan);

  // Forgets every sequence (a re-formed group starts from none).
  void Clear() { sequences_.clear(); }
  size_t num_sequences() const { return sequences_.size(); }
  // A running sequence's state; null for an unknown id.
  const SequenceState* Find(uint64_t seq_id) const {
    const auto it = sequences_.find(seq_id);
    return it == sequences_.end() ? nullptr : &it->second;
  }
  int64_t context_length() const { return context_length_; }

 private:
  // Validates `s` and builds its state. INVALID_ARGUMENT naming the seq id and the field.
  absl::StatusOr<SequenceState> NewSequence(const v1::NewSequence& s) const;
  absl::StatusOr<Plan> PlanStep(const v1::StepRequest& request) const;
  // Checks one scheduled sequence against its cached state; fills `table` with its block table
  // after this step.
  absl::Status CheckScheduled(const v1::ScheduledSequence& s, const SequenceState& state,
                              std::vector<int32_t>* table) const;

  // Constant after construction.
  const int64_t vocab_size_;
  const int64_t context_length_;
  const KvCacheShape kv_;
  const bool samples_;
  const int32_t num_lora_slots_;

  SequenceMap sequences_;
};

}  // namespace tpserve
