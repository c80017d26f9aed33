// The engine: one thread that owns every request, the block pool, the prefix cache and the
// Scheduler, and drives the workers in lockstep. Each step is three calls (nano-vllm's loop):
// Scheduler::Schedule() plans a ScheduledBatch, WorkerPool::Step runs it on every rank,
// Scheduler::Postprocess() applies rank 0's results and Apply() streams them. Planning and applying
// stay separate so that, with pipeline stages (EngineOptions::steps_in_flight > 1), steps N+1 …
// N+S-1 are planned and sent (StepDispatcher) while step N runs in a later stage; their
// sequences are disjoint (Sequence::in_flight), and their answers are applied in the order sent.
//
// Failure model (DESIGN.md): a failed step or heartbeat marks the cluster degraded. For up to
// the recovery grace every request in flight is held: its blocks are released (a re-formed
// group's KV pools hold nothing of it), it keeps the tokens it has streamed, and it waits at the
// front of the queue; new requests queue up to max_queued_requests, or are refused with
// UNAVAILABLE when that is 0. When every rank answers again, a GroupReformer (SetGroupReformer)
// re-forms the group and the held requests recompute prompt and streamed tokens (as after a
// preemption) and go on streaming where they stopped; the workers' sampler draws by (seed,
// output position), so a seeded request samples what it would have without the failure. Past the
// grace, or with a grace of 0, every request fails with UNAVAILABLE "cluster degraded: <rank and
// cause>", new ones are refused with the same status until the group re-forms, and the process
// keeps serving Health throughout. A request whose steps failed more than max_request_holds times
// is failed (INTERNAL, naming the failures) instead of being held again: one that kills a rank
// each time it runs must not hold the cluster in a loop of restarts.
//
// Thread-safe API: front-end threads call Submit*/health/stats, any thread MarkDegraded.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/block_pool.h"
#include "coordinator/constraint_compiler.h"
#include "coordinator/jump_forward.h"
#include "coordinator/metrics.h"
#include "coordinator/prefix_cache.h"
#include "coordinator/recovery_state.h"
#include "coordinator/request_handle.h"
#include "coordinator/request_limits.h"
#include "coordinator/scheduled_batch.h"
#include "coordinator/scheduler.h"
#include "coordinator/sequence.h"
#include "coordinator/step_dispatcher.h"
#include "coordinator/step_outputs.h"
#include "coordinator/worker_pool.h"
#include "model/tokenizer.h"

namespace tpserve {

struct EngineOptions {
  int32_t block_size = 16;                // tokens per KV block
  int32_t num_blocks = 0;                 // KV blocks every rank holds
  int64_t context_length = 0;             // positions the model supports
  int64_t vocab_size = 0;                 // logits per position
  int32_t max_num_seqs = 256;             // running sequences per step
  int32_t max_num_batched_tokens = 2048;  // tokens per step (prefill chunks + decodes)
  // Attention work per step (SchedulerOptions::max_step_attention): keeps a long prompt's steps
  // short, so they neither hold up decodes nor look like a dead rank.
  int64_t max_step_attention = int64_t{2048} * 2048;
  bool enable_prefix_cache = true;
  // Constrained samples append the text their constraint forces without sampling it
  // (JumpForward).
  bool jump_forward = true;
  // Speculative decoding (SchedulerOptions::num_speculative_tokens): 0 is off.
  int32_t num_speculative_tokens = 0;
  int32_t spec_disable_batch_size = 8;
  double spec_min_acceptance = 0.2;  // SchedulerOptions::spec_min_acceptance
  NgramOptions ngram;
  bool draft_model = false;  // proposals from rank 0's draft model instead of n-grams
  // Requests waiting for their first step beyond which new ones are refused with
  // RESOURCE_EXHAUSTED; 0: no limit.
  int32_t max_queued_requests = 0;
  // The least time a step may take before the cluster is degraded. A step of more work gets
  // proportionally longer (Engine::StepTimeout): that a rank is alive the heartbeats say, so a
  // long prefill is not taken for a dead rank.
  absl::Duration step_timeout = absl::Seconds(30);
  // How long requests are held for a lost rank to return (see the failure model above); zero:
  // they fail at once. The coordinator's --recovery-grace, 60 s unless set.
  absl::Duration recovery_grace = absl::ZeroDuration();
  // The time the failure model reads (the grace); tests move their own.
  RecoveryState::Clock clock = [] { return absl::Now(); };
  // A request whose steps failed this many times is failed rather than held again: a request
  // that kills a rank each time it runs would otherwise loop through restarts for ever (the
  // other sequences in those same steps share its fate, as they cannot be told apart).
  int32_t max_request_holds = 3;
  // Steps sent before the oldest returns: the pipeline stages, so that each works on a step of
  // its own (the coordinator's --steps-in-flight). 1: one step at a time.
  int32_t steps_in_flight = 1;
  // Output constraints compile on this pool, each within its timeout.
  ConstraintCompilerOptions grammar;
  RequestLimits limits;
};

// Requests held for lost ranks since start.
struct RecoveryCounters {
  int64_t requests_held = 0;     // samples held when a rank was lost
  int64_t requests_resumed = 0;  // of those, resumed after the group re-formed
  int64_t recoveries = 0;        // times the group re-formed after a loss
};

// What the engine thread last published, for the admin view and metrics.
struct EngineStats {
  int32_t blocks_total = 0;
  int32_t blocks_free = 0;
  int32_t blocks_cached = 0;     // in the prefix tree (some may also be used by requests)
  int32_t blocks_evictable = 0;  // cached and used by no request
  int32_t num_running = 0;
  int32_t num_waiting = 0;
  int32_t num_held = 0;  // samples held while the cluster re-forms (counted in num_waiting too)
  // Samples handed to the engine thread that it has not taken yet (it is in a step): current
  // whenever they change, not only after a step.
  int32_t num_submitted = 0;
  SchedulerCounters counters;
  RecoveryCounters recovery;
  PrefixCache::Stats prefix_cache;
  // Blocks that requests hold now.
  int32_t blocks_used() const { return blocks_total - blocks_free - blocks_evictable; }
};

// Score logits must fit one gRPC message: rank 0's reply for a step, and the client's reply.
inline constexpr int64_t kMaxScoreLogitBytes = 240 << 20;

class Engine {
 public:
  // `pool` and `tokenizer` must outlive the engine. Call Start() to run.
  Engine(EngineOptions options, WorkerPool* pool, const Tokenizer* tokenizer);
  ~Engine();  // Stop()

  void Start();
  // Fails every outstanding request with UNAVAILABLE "coordinator is shutting down" (their
  // streams end with that error) and joins the thread (after the step in flight, if any,
  // returns).
  void Stop();

  // Queues a generation of params.n samples, whose news the handle carries under their index.
  // INVALID_ARGUMENT (naming the field or token) for an empty prompt, a token id outside the
  // vocabulary, a prompt longer than the context length or than the KV pool, max_tokens < 0,
  // anything over its RequestLimits (n, stop strings, stop ids, logit_bias), logprobs outside [-1,
  // kMaxLogprobs], min_tokens outside [0, max_tokens], empty stop strings or bad words, or
  // impossible sampling parameters; RESOURCE_EXHAUSTED when max_queued_requests are waiting (the
  // message says to retry); UNAVAILABLE when degraded, draining or stopping. A constrained
  // request's compile (ConstraintCompiler) runs first: INVALID_ARGUMENT naming the constraint when
  // it does not compile within its timeout, or when the first token has nothing to be drawn from
  // (UpdateSampleMask: an empty language, no allowed token left); CANCELLED when `client_gone`
  // (may be empty) says the client left meanwhile.
  absl::StatusOr<std::shared_ptr<RequestHandle>> SubmitGenerate(
      GenerateParams params, const std::function<bool()>& client_gone = {});
  // Queues teacher-forced scoring of `prompt`: every position's logits, computed in chunks that
  // keep each step's reply under kMaxScoreLogitBytes. The same prompt checks, plus
  // INVALID_ARGUMENT when all the logits would not fit the client's one reply message.
  absl::StatusOr<std::shared_ptr<RequestHandle>> SubmitScore(std::vector<int32_t> prompt,
                                                             int32_t adapter = 0,
                                                             int64_t adapter_generation = 0);

  // Marks the cluster degraded by `cause` (the first cause sticks) and wakes the engine.
  void MarkDegraded(const absl::Status& cause);
  // While degraded, the engine thread holds what it runs (within the recovery grace; past it, it
  // fails them) and calls `reform` (GroupReformer) every second or so until it returns OK; then
  // it empties the prefix cache (a restarted rank's KV pool is empty), restarts step ids, resumes
  // the held requests (or fails them when the attempt ended past the grace) and serves again.
  // Call before Start(). Without it a degraded engine stays degraded.
  void SetGroupReformer(std::function<absl::Status()> reform);
  // OK while serving; otherwise UNAVAILABLE saying why (degraded or stopping; while requests
  // are held, what the cluster waits for). Draining does not count: the process is healthy while
  // it finishes its requests.
  absl::Status health() const;

  // While requests are held for a lost rank: what the cluster waits for (the rank and what its
  // last re-formation attempt said) and how much of the recovery grace is left.
  using Pause = RecoveryPause;
  std::optional<Pause> pause() const;
  // Waits until the cluster serves (not degraded), or `deadline`, or Stop(); true when serving.
  bool AwaitServing(absl::Time deadline) const;
  // Waits until the published stats satisfy `until`, or `deadline`; true when they do.
  bool AwaitStats(const std::function<bool(const EngineStats&)>& until, absl::Time deadline) const;

  // Stops admitting requests (UNAVAILABLE with `why`); those already accepted run to the end.
  // Returns how many were in flight. `until_reformed`: admits again once the group re-forms (a
  // rank that left for a restart is back).
  int32_t Drain(std::string why = kDrainingMessage, bool until_reformed = false);
  static constexpr char kDrainingMessage[] =
      "the server is draining: it finishes the requests it has and accepts no new ones";
  // Waits until no request is queued or running (after a Drain: until those accepted ended), or
  // `deadline`; true when idle.
  bool WaitIdle(absl::Time deadline) const;
  // Ends every request queued or running with `status` (on the engine thread, soon); the engine
  // goes on serving.
  void FailInFlight(const absl::Status& status);
  // Admits requests again.
  void Undrain();
  bool draining() const;
  // Evicts every cached block no request uses, on the engine thread; returns how many. Waits
  // for the step in flight, if any.
  absl::StatusOr<int32_t> FlushPrefixCache();

  // Records request latencies and token counts from now on; `metrics` must outlive the engine.
  void SetMetrics(Metrics* metrics);

  const EngineOptions& options() const { return options_; }
  // The LoRA slots requests may run with (any thread).
  AdapterGate& adapters() { return adapters_; }
  // As of the last engine step (any thread; published by the engine thread).
  EngineStats stats() const;

 private:
  // Runs on the engine thread until Stop().
  void Run();
  // Moves submitted requests into the scheduler; blocks while there is nothing to do, or up to
  // `wait` when the scheduler holds requests it cannot run yet. False when stopping.
  bool TakeSubmitted(absl::Duration wait);
  // Drops requests whose client went away (CANCELLED to the stream, blocks freed).
  void DropCancelled();
  // A step sent to the workers whose answer was not applied yet.
  struct Flight {
    ScheduledBatch batch;
    uint64_t step_id = 0;
    double work = 0;  // StepWork
    absl::Time sent;
    absl::Time deadline;
  };
  // Plans and sends steps while the dispatcher has room and the scheduler has work; false when it
  // sent none.
  bool SendSteps();
  // Sends `batch` as the next step.
  void Send(ScheduledBatch batch);
  // Waits for the oldest step in flight and applies its answer. A step the workers refuse for one
  // sequence's data (StepResponse.refused) fails that sequence alone, and the rest of the batch is
  // sent again as a new step; a transport error, a timeout or a lost rank (a cluster fault) marks
  // the cluster degraded, after the other steps in flight returned.
  void LandOldest();
  // Waits for every step in flight; their answers are dropped, their sequences computed nothing.
  void DropFlights();
  // Hands rank 0's outputs to the scheduler (Postprocess) and streams what it returns.
  void Apply(const ScheduledBatch& batch, const StepOutputs& outputs);
  // Observes the queue time of sequences scheduled for the first time.
  void RecordQueueTimes(const ScheduledBatch& batch);
  // Runs a FlushPrefixCache() that a caller waits for (engine thread).
  void FlushIfRequested();
  // Runs a FailInFlight() (engine thread).
  void FailIfRequested();
  // Ends one sample's stream with `status` (a log line).
  void Fail(Sequence& seq, const absl::Status& status);
  // Fails every request the engine holds with `status`.
  void FailAll(const absl::Status& status);
  // Within the recovery grace: requeues every running request for recompute and marks the new
  // ones held (a log line each). `cause` is why the group was lost.
  void HoldAll(const absl::Status& cause);
  // Fails the running requests whose steps failed more than max_request_holds times.
  void FailRepeatedlyHeld(const absl::Status& cause);
  // After the group re-formed: the held requests go on (a log line each).
  void ResumeHeld(absl::Time now);
  // After the group re-formed past the recovery grace (the attempt itself ran past it): the held
  // requests fail with `status` as they would have had the attempt failed; new ones are served.
  void FailHeld(const absl::Status& status);
  absl::Status HealthLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // One re-formation attempt while degraded (engine thread); true when serving again.
  bool TryReform();
  // Stores what stats() returns (engine thread).
  void PublishStats();
  // Publishes how many samples submitted_ holds (with mutex_ held, so that counts stay in order).
  void SetSubmitted(int32_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // The deadline for a step of `work` (StepWork): options_.step_timeout, or kStepDeadlineMargin
  // times what a unit of work has cost so far, whichever is longer.
  absl::Duration StepTimeout(double work) const;
  int32_t BlocksFor(int64_t num_tokens) const;
  // Checks shared by both Submit*: prompt ids, length and blocks.
  absl::Status CheckPrompt(const std::vector<int32_t>& prompt) const;
  absl::Status CheckGenerate(const GenerateParams& params) const;
  // Hands the samples of one request to the engine thread under one request id; refuses them
  // when stopping, degraded, draining or over max_queued_requests.
  absl::StatusOr<std::shared_ptr<RequestHandle>> Enqueue(
      std::vector<std::unique_ptr<Sequence>> samples);

  // Constant after construction.
  const EngineOptions options_;
  WorkerPool* const pool_;
  const Tokenizer* const tokenizer_;
  ConstraintCompiler constraints_;
  const std::unique_ptr<const JumpForward> jump_forward_;  // null with jump_forward off

  // Engine thread only. Destroyed in reverse order: the scheduler releases its blocks into the
  // cache and the pool, the cache into the pool.
  BlockPool blocks_;
  std::unique_ptr<PrefixCache> cache_;  // a NoPrefixCache with enable_prefix_cache off
  Scheduler scheduler_;
  uint64_t step_id_ = 0;
  StepDispatcher dispatcher_;
  std::deque<Flight> flights_;  // oldest first
  absl::Time last_landed_ = absl::InfinitePast();
  // Seconds per unit of StepWork, a moving average over the steps run; before the first, a slow
  // CPU's 1 ms. Engine thread only.
  double seconds_per_work_ = 1e-3;
  std::function<absl::Status()> reform_;  // set before Start
  std::string last_reform_error_;
  // Requests are held for the group to re-form; read by pause() on other threads, which keeps
  // reporting the pause past the grace while a re-formation attempt still runs.
  std::atomic<bool> holding_{false};
  RecoveryCounters recovery_;

  mutable absl::Mutex stats_mutex_;
  EngineStats stats_ ABSL_GUARDED_BY(stats_mutex_);
  std::atomic<Metrics*> metrics_{nullptr};

  mutable absl::Mutex mutex_;
  std::vector<std::unique_ptr<Sequence>> submitted_ ABSL_GUARDED_BY(mutex_);
  RecoveryState recovery_state_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  bool draining_ ABSL_GUARDED_BY(mutex_) = false;
  std::string drain_reason_ ABSL_GUARDED_BY(mutex_);
  bool undrain_when_reformed_ ABSL_GUARDED_BY(mutex_) = false;
  absl::Status fail_requested_ ABSL_GUARDED_BY(mutex_);  // OK: none
  // The engine thread holds no request, and was about to wait for one (TakeSubmitted).
  bool idle_ ABSL_GUARDED_BY(mutex_) = true;
  uint64_t next_request_id_ ABSL_GUARDED_BY(mutex_) = 1;
  AdapterGate adapters_;
  // FlushPrefixCache tickets: callers take flush_requested_ + 1 and wait for flush_done_.
  uint64_t flush_requested_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t flush_done_ ABSL_GUARDED_BY(mutex_) = 0;
  int32_t flush_evicted_ ABSL_GUARDED_BY(mutex_) = 0;

  std::thread thread_;
};

}  // namespace tpserve
