// Continuous batching with chunked prefill, the prefix cache and preemption (DESIGN.md
// "Scheduler"). Pure logic over sequences, counts and block ids: the engine drives it, tests
// drive it with a fake executor.
//
// There are no prefill and decode phases (vLLM v1): each sequence has `num_computed` catching
// up with `tokens.size()`. A step takes, within `max_num_batched_tokens` and
// `max_step_attention`:
//   1. every running sequence in admission order: one token when it is decoding, the next chunk
//      of its prompt (or of its recompute after preemption) when it is not. The decodes later in
//      the order are set aside first, so a prefill chunk never takes the tokens or the attention
//      work they need: every decoding sequence advances every step;
//   2. then waiting sequences FCFS, each starting after its longest cached prefix, while the
//      budget, `max_num_seqs` and the blocks allow. Admission stops at the first that does not
//      fit (no overtaking), and in a step that had to preempt. The later samples of an n > 1
//      request wait (and are passed over) until the first has computed the prompt, then take
//      its blocks from the cache.
// A step's attention work is what each entry's tokens attend to, num_tokens × (start +
// num_tokens) (StepAttention), summed; a prefill chunk far into a long prompt is therefore
// shorter than one at its start, and a long prompt runs as many steps of bounded length instead
// of one that could outlast the step deadline. Decodes always run; the first prefill chunk of a
// step gets at least one block of tokens whatever the attention left, so decodes cannot starve
// prefills.
//
// Speculative decoding (SchedulerOptions::num_speculative_tokens) runs a decoding sequence's last
// token and k proposals; after rank 0 verified them, the accepted prefix is committed and the
// blocks that only rejected proposals reached are freed at once (FreeRejectedBlocks).
//
// Blocks come from the free list, then from evicting unlocked cached blocks (LRU). When neither
// has enough, the most recently admitted running sequence is preempted: its blocks are
// released (its full blocks stay in the cache, so recompute is often a cache hit) and it goes
// back to the front of the waiting queue, to be recomputed under a fresh worker id.
//
// Full blocks enter the cache after the step that computed them (Commit), so requests that
// share a prefix share blocks even while the first is still running.
//
// With several steps in flight (SchedulerOptions::steps_in_flight = S, one per pipeline stage), a
// step takes only sequences that are in no step in flight (Sequence::in_flight), and at most
// ceil(sequences that can run / S) of them, so that S steps of about the same size fill the
// stages. A sequence in flight is neither preempted nor cancelled until its step returns (Commit or
// Returned); one that needs blocks only newer sequences in flight could free waits for them.
//
// Not thread-safe: owned by the engine thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "coordinator/block_pool.h"
#include "coordinator/jump_forward.h"
#include "coordinator/ngram_proposer.h"
#include "coordinator/prefix_cache.h"
#include "coordinator/request_handle.h"
#include "coordinator/scheduled_batch.h"
#include "coordinator/sequence.h"
#include "coordinator/step_outcome.h"
#include "coordinator/step_outputs.h"

namespace tpserve {

struct SchedulerOptions {
  int32_t block_size = 16;
  int32_t max_num_seqs = 256;             // running sequences
  int32_t max_num_batched_tokens = 2048;  // tokens run per step
  // Attention work per step (StepAttention, summed over the entries): by default a 2,048-token
  // chunk over a 2,048-token context.
  int64_t max_step_attention = int64_t{2048} * 2048;
  // Score rows (all_logits) per step, so that one step's logits fit rank 0's reply.
  int32_t max_logit_rows = 1024;
  int64_t context_length = 0;  // generation stops here ("length")
  int64_t vocab_size = 0;      // tokens from rank 0 outside [0, vocab_size) fail the request
  // Tokens that end generation unless the request ignores EOS (EOS, <|im_end|>, …).
  absl::flat_hash_set<int32_t> end_of_generation_ids;
  // Constrained samples append what their constraint forces without sampling it (null: they
  // sample every token). Requests that ask for log-probabilities sample every token.
  const JumpForward* jump_forward = nullptr;
  // Speculative decoding by n-gram proposals (0: off): a decoding sequence runs its last token
  // and up to this many proposed tokens, which rank 0 verifies in the same step. Not for
  // constrained samples, nor in steps with more decoding sequences than spec_disable_batch_size,
  // where the batch already fills the products.
  int32_t num_speculative_tokens = 0;
  int32_t spec_disable_batch_size = 8;
  // A request whose accepted share of proposed tokens falls below this, once it has proposed
  // kSpecJudgedAfter tokens, speculates no more (0: always speculates).
  double spec_min_acceptance = 0.2;
  NgramOptions ngram;
  // The proposals come from rank 0's draft model (worker/draft_runner.h) instead of n-grams: each
  // sampling step asks for the next step's, and the block table covers what the draft writes.
  bool draft_model = false;
  // Steps the engine keeps in flight at once (a pipeline's micro-batches): a sequence runs in one
  // of them at a time, and each step takes at most its share of the sequences (see Scheduler).
  int32_t steps_in_flight = 1;
};

// Proposed tokens after which a request's acceptance is judged (spec_min_acceptance).
inline constexpr int64_t kSpecJudgedAfter = 16;

struct SchedulerCounters {
  int64_t num_preemptions = 0;
  int64_t jump_forward_tokens = 0;   // appended without sampling
  int64_t spec_drafts = 0;           // steps of a sequence that carried proposals
  int64_t spec_draft_tokens = 0;     // tokens proposed
  int64_t spec_accepted_tokens = 0;  // of those, accepted
  // Verified runs of proposals by how many were accepted: [num_speculative_tokens + 1] when
  // speculation is on, else empty.
  std::vector<int64_t> spec_acceptance_lengths;
};

// The attention work of running `num_tokens` tokens from position `start`: the tokens times the
// context the last of them attends to.
inline int64_t StepAttention(int64_t start, int64_t num_tokens) {
  return num_tokens * (start + num_tokens);
}

class Scheduler {
 public:
  // `pool` and `cache` (a NoPrefixCache to run without one) must outlive the scheduler.
  Scheduler(SchedulerOptions options, BlockPool* pool, PrefixCache* cache);
  ~Scheduler();  // releases the blocks of every sequence it holds

  // Queues `seq` at the back of the waiting queue. Its prompt must fit the pool (checked by the
  // engine at submission).
  void Add(std::unique_ptr<Sequence> seq);

  // Plans the next step (see the class comment). Empty when nothing can run.
  ScheduledBatch Schedule();

  // After `batch` ran, with rank 0's outputs `step`: commits the step (Commit), then per entry the
  // tokens rank 0 returned, in order, each through AppendToken and the sequence's TokenText (its
  // text and stop strings), until one ends it; a Score entry's logit rows. Sequences that end
  // (finished, scored, or failed by a reply that lacks their output) leave the scheduler. One
  // update per entry that produced something, in batch order.
  std::vector<SequenceUpdate> Postprocess(const ScheduledBatch& batch, const StepOutputs& step);

  // After `batch` ran: every entry's tokens are computed, and newly full blocks of Generate
  // sequences enter the prefix cache.
  void Commit(const ScheduledBatch& batch);
  // After `batch` failed: its sequences are no longer in flight, and nothing of it is computed
  // (the engine then requeues or fails them).
  void Returned(const ScheduledBatch& batch);

  // Appends a sampled token to a running Generate sequence and says whether it ends it: "stop"
  // for an end-of-generation token (unless ignore_eos) or a stop token id, "length" at
  // max_tokens, at the context length, or when the sequence could never fit the pool again.
  std::optional<FinishReason> AppendToken(Sequence& seq, int32_t token, bool end_of_generation);

  // Removes a running sequence, releases its blocks and queues its worker id for the next
  // step's finished_seq_ids.
  std::unique_ptr<Sequence> Finish(Sequence* seq);
  // Removes every running or waiting sequence whose client cancelled (blocks released now); one
  // in flight waits for its step to return.
  std::vector<std::unique_ptr<Sequence>> TakeCancelled();
  // Removes every running or waiting sequence `take` picks (blocks released now), but those in
  // flight.
  std::vector<std::unique_ptr<Sequence>> TakeIf(absl::FunctionRef<bool(const Sequence&)> take);
  // Removes every sequence (the engine fails them). The workers' state is then unknown, so no
  // finished ids are kept.
  std::vector<std::unique_ptr<Sequence>> TakeAll();
  // Puts every running sequence back at the front of the waiting queue, in admission order, its
  // blocks released, to recompute its prompt and generated tokens when admitted again: after a
  // lost rank the re-formed group's KV pools hold nothing of it. No finished ids are kept.
  void RequeueAll();
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  // The waiting queue, front first (after RequeueAll: every sequence).
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }

  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  const SchedulerCounters& counters() const { return counters_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  int32_t BlocksFor(int64_t num_tokens) const;
  // `n` blocks from the free list, evicting cached blocks when needed; nullopt (nothing taken)
  // when even eviction cannot supply them.
  std::optional<std::vector<int32_t>> AllocateBlocks(int32_t n);
  // Tokens to run for `seq` this step within `budget` tokens, `attention` work (StepAttention)
  // and `logit_rows` score rows. A decode (one token left) ignores `attention`; with
  // `first_prefill`, a prefill chunk gets at least one block whatever `attention` is.
  int32_t ChunkSize(const Sequence& seq, int32_t budget, int64_t attention, int32_t logit_rows,
                    bool first_prefill) const;
  // Takes the longest cached prefix for a waiting sequence: its blocks (referenced) and lock.
  void TakeCachedPrefix(Sequence& seq);
  // Drops the sequence's blocks and lock; it must run from scratch (or its cached prefix) next.
  void ReleaseBlocks(Sequence& seq);
  // A sample leaves (finished or cancelled): its group must not wait for it any more.
  void LeaveGroup(Sequence& seq);
  // What PreemptLast did: requeued a sequence after `from`, `from` itself, or nothing, since
  // every sequence after `from` is in flight.
  enum class Preemption { kNewer, kItself, kNone };
  // Requeues the most recently admitted running sequence not in flight for recompute (one at
  // `from` or later: those before it are in this step already), but not `from` while newer ones
  // are in flight.
  Preemption PreemptLast(size_t from);
  // Puts a sequence taken from running_ at the front of the waiting queue, forgetting what only
  // the workers' state gave it (score rows, the draft's proposals).
  void Requeue(std::unique_ptr<Sequence> seq);
  std::unique_ptr<Sequence> TakeRunning(size_t index);
  // Appends `token` (AppendToken) and releases its text (the sequence's TokenText, stop strings
  // included) into `update`, with its log-probabilities from `output`'s row `row` when `output`
  // is not null.
  std::optional<FinishReason> Emit(Sequence& seq, int32_t token, const SequenceStepOutput* output,
                                   int row, SequenceUpdate* update);
  // The most tokens a jump forward may put in place of the token `seq` just sampled: the
  // per-step cap (kMaxJumpForwardTokens), and what max_tokens and the context leave.
  int32_t JumpLimit(const Sequence& seq) const;
  // Proposed tokens for a decoding sequence this step (empty: none), at most `budget`.
  std::vector<int32_t> Proposals(const Sequence& seq, int32_t budget) const;
  // The most tokens `seq` may have proposed after its next `run` tokens (0 where it does not
  // speculate): every accepted proposal and the token after them must fit max_tokens and the
  // context.
  int32_t ProposalLimit(const Sequence& seq, int64_t run) const;
  // After a step that verified drafts or asked for proposals: releases the blocks beyond what the
  // next step runs (the tokens not computed yet and the draft's new proposals), which hold only
  // rejected drafts, and has the workers' table cut to match (Sequence::kept_blocks).
  void FreeRejectedBlocks(Sequence& seq);
  // After a step verified `proposed` of `seq`'s proposals and accepted `accepted`: its next k.
  void AdaptSpeculation(Sequence& seq, int32_t proposed, int32_t accepted);
  // Draft model: the proposals rank 0 is asked to make after `seq` runs `n` tokens this step; 0
  // without a draft model, in a step that does not speculate, when the step does not sample, when
  // the next step will hold more sequences than speculate, or once the draft is behind.
  int32_t ProposalsAsked(const Sequence& seq, int32_t n, bool speculate) const;
  // A scheduled sampling step that asked no proposals leaves the draft behind.
  void NoteProposalsAsked(Sequence& seq, int32_t n, int32_t num_proposals);
  // Postprocess of one entry: false when it produced nothing to stream.
  bool PostprocessGenerate(const ScheduledBatch::Entry& entry, const SequenceStepOutput* output,
                           SequenceUpdate* update);
  bool PostprocessScore(const ScheduledBatch::Entry& entry, const SequenceStepOutput* output,
                        SequenceUpdate* update);

  const SchedulerOptions options_;
  BlockPool* const pool_;
  PrefixCache* const cache_;

  std::deque<std::unique_ptr<Sequence>> waiting_;   // FCFS; preempted ones go to the front
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  std::vector<uint64_t> finished_seq_ids_;          // sent with the next step
  uint64_t next_seq_id_ = 1;
  SchedulerCounters counters_;
};

}  // namespace tpserve
