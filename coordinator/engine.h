// The engine: one thread that owns every request, the block pool and the plan of each step, and
// drives the workers in lockstep. Each step is three calls (nano-vllm's loop): Schedule() plans
// a ScheduledBatch, WorkerPool::Step runs it on every rank, Apply() hands rank 0's results to
// the requests. Planning and applying stay separate so that a later Scheduler (chunked prefill,
// prefix cache) can replace Schedule() and plan step N+1 while step N runs.
//
// Batching for now: FCFS admission while blocks allow (up to max_batch_size sequences and
// max_prefill_tokens per step, the first prompt always fits), whole-prompt prefill, one decode
// token per running sequence per step. When a running sequence needs a block and none is free,
// the most recently admitted running sequence is preempted: its blocks are freed and it is
// requeued at the front, to be recomputed (prompt + generated tokens) under a fresh worker id.
//
// Failure model (DESIGN.md): a failed step or heartbeat marks the cluster degraded; every
// in-flight and waiting request then fails with UNAVAILABLE "cluster degraded: <rank and
// cause>", new requests are refused with the same status, and the process keeps serving
// Health. Re-forming the group when the ranks come back is not implemented yet.
//
// Thread-safe API: front-end threads call Submit*/health, any thread MarkDegraded.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/block_pool.h"
#include "coordinator/request_stream.h"
#include "coordinator/scheduled_batch.h"
#include "coordinator/sequence.h"
#include "coordinator/worker_pool.h"
#include "model/tokenizer.h"

namespace tpserve {

struct EngineOptions {
  int32_t block_size = 16;            // tokens per KV block
  int32_t num_blocks = 0;             // KV blocks every rank holds
  int64_t context_length = 0;         // positions the model supports
  int64_t vocab_size = 0;             // logits per position
  int32_t max_batch_size = 32;        // sequences per step
  int32_t max_prefill_tokens = 8192;  // prompt tokens admitted per step (the first always fits)
  absl::Duration step_timeout = absl::Seconds(30);
};

// Score logits must fit one gRPC message from rank 0.
inline constexpr int64_t kMaxScoreLogitBytes = 240 << 20;

class Engine {
 public:
  // `pool` and `tokenizer` must outlive the engine. Call Start() to run.
  Engine(EngineOptions options, WorkerPool* pool, const Tokenizer* tokenizer);
  ~Engine();  // Stop()

  void Start();
  // Fails every outstanding request with UNAVAILABLE "coordinator is shutting down" and joins
  // the thread (after the step in flight, if any, returns).
  void Stop();

  // Queues a generation. INVALID_ARGUMENT (naming the field or token) for an empty prompt, a
  // token id outside the vocabulary, a prompt longer than the context length or than the KV
  // pool, max_tokens < 0, or impossible sampling parameters; UNAVAILABLE when degraded or
  // stopping.
  absl::StatusOr<std::shared_ptr<RequestStream>> SubmitGenerate(GenerateParams params);
  // Queues teacher-forced scoring of `prompt`: one step with every position's logits. The same
  // prompt checks, plus INVALID_ARGUMENT when the logits would not fit one message.
  absl::StatusOr<std::shared_ptr<RequestStream>> SubmitScore(std::vector<int32_t> prompt);

  // Marks the cluster degraded by `cause` (the first cause sticks) and wakes the engine.
  void MarkDegraded(const absl::Status& cause);
  // OK while serving; otherwise the UNAVAILABLE status new requests get.
  absl::Status health() const;

  const EngineOptions& options() const { return options_; }
  // KV blocks in use as of the last engine step (any thread; published by the engine thread).
  int32_t num_blocks_used() const { return blocks_used_.load(std::memory_order_relaxed); }

 private:
  // Runs on the engine thread until Stop().
  void Run();
  // Moves submitted requests into waiting_; blocks while there is nothing to do. False when
  // stopping.
  bool TakeSubmitted();
  // Drops requests whose client went away (CANCELLED to the stream, blocks freed).
  void DropCancelled();
  // Plans the next step; may preempt (see the class comment).
  ScheduledBatch Schedule();
  // Applies rank 0's outputs: appends tokens, streams them, finishes sequences.
  void Apply(const ScheduledBatch& batch, const v1::StepResponse& response);
  // Fails every request the engine holds with `status`.
  void FailAll(const absl::Status& status);
  // Stores the block pool's usage for num_blocks_used() (engine thread).
  void PublishBlockUsage();

  // Frees `seq`'s blocks and queues its worker id for finished_seq_ids (engine thread).
  void Release(Sequence& seq);
  // Running sequence at running_[index] leaves the batch: running_ stays in admission order.
  std::unique_ptr<Sequence> TakeRunning(size_t index);
  // Requeues the most recently admitted running sequence for recompute.
  void PreemptLast();
  int32_t BlocksFor(int64_t num_tokens) const;
  // Checks shared by both Submit*: prompt ids, length, blocks, and serving state.
  absl::Status CheckPrompt(const std::vector<int32_t>& prompt) const;
  absl::StatusOr<std::shared_ptr<RequestStream>> Enqueue(std::unique_ptr<Sequence> seq);

  // Constant after construction.
  const EngineOptions options_;
  WorkerPool* const pool_;
  const Tokenizer* const tokenizer_;

  // Engine thread only.
  BlockPool blocks_;
  std::deque<std::unique_ptr<Sequence>> waiting_;   // FCFS; preempted ones go to the front
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  std::vector<uint64_t> finished_seq_ids_;          // sent with the next step
  uint64_t next_seq_id_ = 1;
  uint64_t step_id_ = 0;

  // num_blocks - blocks_.num_free(), published before and after each step.
  std::atomic<int32_t> blocks_used_{0};

  mutable absl::Mutex mutex_;
  std::vector<std::unique_ptr<Sequence>> submitted_ ABSL_GUARDED_BY(mutex_);
  absl::Status degraded_ ABSL_GUARDED_BY(mutex_);  // OK while serving
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  uint64_t next_request_id_ ABSL_GUARDED_BY(mutex_) = 1;

  std::thread thread_;
};

}  // namespace tpserve
