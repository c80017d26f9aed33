// DraftRunner: the draft model of speculative decoding (--speculative draft), on rank 0.
//
// The draft is a second, smaller model with the target's tokenizer, or (self-speculation) the
// target's own first layers with its final norm and output head. Rank 0 holds all of it
// (replicated, not sharded): a draft step is a few small products that all-reduces across ranks
// would only slow, and only rank 0 needs its tokens, since proposals reach the other ranks as the
// next step's draft_token_ids. Its KV pool has the target's number of blocks under the same block
// ids, so the coordinator's block tables address both pools.
//
// After each step's tokens are known, every sequence that asks (ScheduledSequence.num_proposals)
// is brought up to date in the draft (the tokens its draft KV does not hold yet: the whole prompt
// the first time, then the accepted proposals and the token after them) and then drafts one token
// at a time, all such sequences in one batch per draft position: k proposals cost k draft forward
// passes, none of them a coordinator round trip. Each proposal is drawn from q, the draft's
// distribution under the request's temperature, top-k, top-p and min-p (a point mass at its argmax
// for greedy requests), from a random stream of its own; the rows of q stay here and are handed to
// the next step's verification (ProposalProbs), so rejection sampling keeps the target's
// distribution exactly.
//
// Not thread-safe: the worker's execution thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/sampling_params.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/comm/single_rank_communicator.h"
#include "worker/loaded_shard.h"
#include "worker/logits_processor.h"
#include "worker/step_planner.h"

namespace tpserve {

class DraftRunner {
 public:
  // Loads `target`'s draft (draft_model_path, its first draft_num_layers layers when that is
  // positive) on the CPU with a pool of `target_kv`'s blocks. INVALID_ARGUMENT naming the file
  // when its vocabulary size differs from the target's (`target_vocab`).
  static absl::StatusOr<std::unique_ptr<DraftRunner>> Create(const ModelRunnerOptions& target,
                                                             const KvCacheShape& target_kv,
                                                             int64_t target_vocab);

  // q's rows for `drafts` when they are (a prefix of) the proposals this runner made for
  // `seq_id`; empty otherwise (the drafts are then verified as point masses).
  absl::Span<const float> ProposalProbs(uint64_t seq_id, absl::Span<const int32_t> drafts) const;

  // After `request`'s step committed in `planner`: proposals for every sequence that asked and
  // sampled (`results` holds the step's tokens, one per scheduled sequence), written into the
  // matching outputs of `response`. Forgets the finished sequences first.
  absl::Status Propose(const v1::StepRequest& request, const StepPlanner& planner,
                       absl::Span<const LogitsResult> results, v1::StepResponse* response);

  // Forgets every sequence.
  void Clear() { sequences_.clear(); }

  const LoadedShard& shard() const { return *loaded_; }

 private:
  struct Sequence {
    std::vector<int32_t> tokens;  // what the draft's KV was computed for, then its proposals
    int64_t computed = 0;         // positions whose draft KV holds tokens[position]
    std::vector<int32_t> proposals;
    std::vector<float> probs;  // [proposals, vocab]: q of each
  };
  // One sequence of a draft pass.
  struct Drafting {
    uint64_t seq_id;
    Sequence* seq;
    const SamplingParams* params;
    absl::Span<const int32_t> table;
    int64_t prompt_len;
    int32_t wanted;  // proposals to make
  };

  DraftRunner(std::unique_ptr<SingleRankCommunicator> comm, std::unique_ptr<LoadedShard> loaded);

  // One forward pass over every sequence of `drafting` that still wants a proposal: from its
  // first position without draft KV to its last token; then draws the next proposal of each.
  absl::Status DraftOnce(std::vector<Drafting>& drafting);

  std::unique_ptr<SingleRankCommunicator> comm_;  // a world of one
  std::unique_ptr<LoadedShard> loaded_;
  // Node-based: a pass holds pointers to its sequences while others are added.
  absl::node_hash_map<uint64_t, Sequence> sequences_;
  std::vector<float> logits_;  // reused between passes
};

}  // namespace tpserve
