#include "coordinator/engine.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "coordinator/radix_cache.h"
#include "coordinator/step_wire.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "engine";

SchedulerOptions ToSchedulerOptions(const EngineOptions& options, const Tokenizer& tokenizer,
                                    const JumpForward* jump_forward) {
  SchedulerOptions s;
  s.block_size = options.block_size;
  s.max_num_seqs = options.max_num_seqs;
  s.max_num_batched_tokens = options.max_num_batched_tokens;
  s.max_step_attention = options.max_step_attention;
  s.max_logit_rows = static_cast<int32_t>(
      std::clamp<int64_t>(kMaxScoreLogitBytes / (std::max<int64_t>(options.vocab_size, 1) * 4), 1,
                          options.max_num_batched_tokens));
  s.context_length = options.context_length;
  s.vocab_size = options.vocab_size;
  s.end_of_generation_ids = tokenizer.end_of_generation_ids();
  s.jump_forward = jump_forward;
  s.num_speculative_tokens = options.num_speculative_tokens;
  s.spec_disable_batch_size = options.spec_disable_batch_size;
  s.spec_min_acceptance = options.spec_min_acceptance;
  s.ngram = options.ngram;
  s.draft_model = options.draft_model;
  s.steps_in_flight = options.steps_in_flight;
  return s;
}

}  // namespace

Engine::Engine(EngineOptions options, WorkerPool* pool, const Tokenizer* tokenizer)
    : options_(options),
      pool_(pool),
      tokenizer_(tokenizer),
      constraints_(*tokenizer, options.grammar),
      jump_forward_(options.jump_forward ? std::make_unique<JumpForward>(*tokenizer) : nullptr),
      blocks_(options.num_blocks),
      cache_(options.enable_prefix_cache
                 ? std::unique_ptr<PrefixCache>(
                       std::make_unique<RadixCache>(options.block_size, &blocks_))
                 : std::make_unique<NoPrefixCache>()),
      scheduler_(ToSchedulerOptions(options, *tokenizer, jump_forward_.get()), &blocks_,
                 cache_.get()),
      dispatcher_(pool, options.steps_in_flight),
      recovery_state_(options.recovery_grace, options.clock) {
  TP_CHECK(options_.block_size > 0 && options_.max_num_seqs > 0);
  TP_CHECK(options_.max_num_batched_tokens > 0);
  TP_CHECK(options_.context_length > 0 && options_.vocab_size > 0);
  PublishStats();
}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  TP_CHECK(!thread_.joinable());
  thread_ = std::thread([this] {
    NameThisThread("tp-engine");
    Run();
  });
}

void Engine::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

int32_t Engine::BlocksFor(int64_t num_tokens) const {
  return static_cast<int32_t>((num_tokens + options_.block_size - 1) / options_.block_size);
}

absl::StatusOr<int32_t> Engine::FlushPrefixCache() {
  absl::MutexLock lock(&mutex_);
  const uint64_t ticket = ++flush_requested_;
  auto done = [this, ticket]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return flush_done_ >= ticket || stopping_;
  };
  if (!mutex_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(60)) || flush_done_ < ticket) {
    return absl::UnavailableError("the engine did not get to the flush (stopping or stuck)");
  }
  return flush_evicted_;
}

void Engine::SetMetrics(Metrics* metrics) { metrics_.store(metrics); }

void Engine::FlushIfRequested() {
  uint64_t requested;
  {
    absl::MutexLock lock(&mutex_);
    requested = flush_requested_;
    if (requested == flush_done_) return;
  }
  const int32_t evicted = cache_->EvictAll();
  LogInfo(kLog, "prefix cache flushed: %d blocks evicted", evicted);
  PublishStats();
  absl::MutexLock lock(&mutex_);
  flush_evicted_ = evicted;
  flush_done_ = requested;
}

void Engine::FailIfRequested() {
  absl::Status status;
  {
    absl::MutexLock lock(&mutex_);
    std::swap(status, fail_requested_);
  }
  if (status.ok()) return;
  while (!flights_.empty()) LandOldest();  // their sequences are about to end
  FailAll(status);
  PublishStats();
}

void Engine::Run() {
  // Requests the scheduler holds but cannot run yet are retried at this pace.
  constexpr absl::Duration kRetry = absl::Milliseconds(5);
  // Between attempts to re-form the group while degraded.
  constexpr absl::Duration kReformRetry = absl::Seconds(1);
  bool ran = true;
  for (;;) {
    PublishStats();
    if (!TakeSubmitted(ran ? absl::ZeroDuration() : kRetry)) break;
    FlushIfRequested();
    FailIfRequested();
    absl::Status health;
    bool hold = false;
    absl::Status expired;
    {
      absl::MutexLock lock(&mutex_);
      health = recovery_state_.degraded();
      hold = recovery_state_.WithinGrace();
      if (!health.ok() && !hold) expired = recovery_state_.GraceExpired();
    }
    if (!health.ok()) {
      DropFlights();  // their sequences are about to be requeued or failed
      if (hold) {
        HoldAll(health);
      } else {
        FailAll(expired);
      }
      ran = false;
      if (reform_ != nullptr && !TryReform()) {
        absl::MutexLock lock(&mutex_);
        mutex_.AwaitWithTimeout(absl::Condition(&stopping_), kReformRetry);
      }
      continue;
    }
    DropCancelled();
    ran = SendSteps();
    if (flights_.empty()) continue;
    LandOldest();
    ran = true;  // what it applied may let more run at once
  }
  DropFlights();
  FailAll(absl::UnavailableError("coordinator is shutting down"));
  PublishStats();
  absl::MutexLock lock(&mutex_);
  idle_ = true;
}

EngineStats Engine::stats() const {
  absl::MutexLock lock(&stats_mutex_);
  return stats_;
}

bool Engine::AwaitStats(const std::function<bool(const EngineStats&)>& until,
                        absl::Time deadline) const {
  absl::MutexLock lock(&stats_mutex_);
  auto holds = [this, &until]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(stats_mutex_) { return until(stats_); };
  return stats_mutex_.AwaitWithDeadline(absl::Condition(&holds), deadline);
}

void Engine::PublishStats() {
  EngineStats stats;
  stats.blocks_total = blocks_.num_blocks();
  stats.blocks_free = blocks_.num_free();
  stats.blocks_cached = cache_->num_cached_blocks();
  stats.blocks_evictable = cache_->num_evictable_blocks();
  stats.prefix_cache = cache_->stats();
  stats.num_running = scheduler_.num_running();
  stats.num_waiting = scheduler_.num_waiting();
  stats.num_held = holding_ ? stats.num_waiting : 0;
  stats.counters = scheduler_.counters();
  stats.recovery = recovery_;
  if (Metrics* metrics = metrics_.load(); metrics != nullptr) {
    EngineState state;
    state.num_running = stats.num_running;
    state.num_waiting = stats.num_waiting;
    state.kv_cache_usage =
        stats.blocks_total > 0 ? static_cast<double>(stats.blocks_used()) / stats.blocks_total : 0;
    state.num_preemptions = stats.counters.num_preemptions;
    state.prefix_cache_query_tokens = stats.prefix_cache.query_tokens;
    state.prefix_cache_hit_tokens = stats.prefix_cache.hit_tokens;
    state.jump_forward_tokens = stats.counters.jump_forward_tokens;
    state.spec_drafts = stats.counters.spec_drafts;
    state.spec_draft_tokens = stats.counters.spec_draft_tokens;
    state.spec_accepted_tokens = stats.counters.spec_accepted_tokens;
    state.spec_acceptance_lengths = stats.counters.spec_acceptance_lengths;
    state.num_held = stats.num_held;
    state.requests_held = recovery_.requests_held;
    state.requests_resumed = recovery_.requests_resumed;
    state.recoveries = recovery_.recoveries;
    {
      absl::MutexLock lock(&mutex_);
      state.degraded = !recovery_state_.serving();
    }
    metrics->SetEngineState(state);
  }
  absl::MutexLock lock(&stats_mutex_);
  stats.num_submitted = stats_.num_submitted;  // Enqueue's and TakeSubmitted's
  stats_ = stats;
}

void Engine::SetSubmitted(int32_t n) {
  absl::MutexLock lock(&stats_mutex_);
  stats_.num_submitted = n;
}

bool Engine::TakeSubmitted(absl::Duration wait) {
  const bool idle = scheduler_.idle();
  std::vector<std::unique_ptr<Sequence>> submitted;
  {
    absl::MutexLock lock(&mutex_);
    // Degraded with a reformer: wake to re-form the group (the attempts pace themselves).
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return stopping_ || !submitted_.empty() || flush_requested_ != flush_done_ ||
             !fail_requested_.ok() || (reform_ != nullptr && !recovery_state_.serving());
    };
    idle_ = idle && submitted_.empty();
    if (idle) {
      mutex_.Await(absl::Condition(&wake));
    } else if (wait > absl::ZeroDuration()) {
      mutex_.AwaitWithTimeout(absl::Condition(&wake), wait);
    }
    if (stopping_) return false;
    submitted.swap(submitted_);
    SetSubmitted(0);
    idle_ = idle && submitted.empty();
  }
  for (auto& seq : submitted) scheduler_.Add(std::move(seq));
  return true;
}

void Engine::DropCancelled() {
  for (std::unique_ptr<Sequence>& seq : scheduler_.TakeCancelled()) {
    LogInfo(kLog, "request %d: cancelled by the client after %d tokens", seq->request_id,
            seq->num_generated());
    seq->handle->Fail(seq->sample, absl::CancelledError("cancelled by the client"));
    if (Metrics* metrics = metrics_.load(); metrics != nullptr) metrics->AddRequestSuccess("abort");
  }
}

void Engine::Apply(const ScheduledBatch& batch, const StepOutputs& outputs) {
  std::vector<SequenceUpdate> updates = scheduler_.Postprocess(batch, outputs);
  const absl::Time now = absl::Now();
  Metrics* metrics = metrics_.load();
  for (SequenceUpdate& update : updates) {
    Sequence& seq = *update.seq;
    if (update.num_sampled > 0) {
      if (metrics != nullptr) {
        if (seq.last_token == absl::InfinitePast()) {
          metrics->ObserveTimeToFirstToken(absl::ToDoubleSeconds(now - seq.arrival));
        } else {
          metrics->ObserveInterTokenLatency(absl::ToDoubleSeconds(now - seq.last_token));
        }
        metrics->AddGenerationTokens(update.num_sampled);
      }
      seq.last_token = now;
    }
    for (SequenceUpdate::Token& token : update.tokens) {
      seq.handle->Push(seq.sample, token.id, std::move(token.text), std::move(token.logprob));
    }
    if (!update.tail.empty()) seq.handle->PushText(seq.sample, std::move(update.tail));
    if (!update.error.ok()) {
      LogError(kLog, "request %d: %s", seq.request_id, update.error.message());
    } else if (seq.finish_reason.has_value()) {
      const FinishReason finish = *seq.finish_reason;
      if (metrics != nullptr) {
        metrics->ObserveE2eRequestLatency(absl::ToDoubleSeconds(now - seq.arrival));
        metrics->AddPromptTokens(seq.prompt_len);
        metrics->AddRequestSuccess(FinishReasonName(finish));
      }
      LogInfo(kLog,
              "request %d: sample %d finished (%s), %d prompt (%d cached) + %d generated tokens "
              "in %.3f s",
              seq.request_id, seq.sample, FinishReasonName(finish), seq.prompt_len,
              std::max(seq.cached_prompt_tokens, 0), seq.num_generated(),
              absl::ToDoubleSeconds(now - seq.arrival));
    } else if (update.finished != nullptr) {
      LogInfo(kLog, "request %d: scored %d positions in %.3f s", seq.request_id, seq.prompt_len,
              absl::ToDoubleSeconds(now - seq.arrival));
    }
  }
  // Clients learn of the end only after the stats say so: what they see next in /metrics,
  // ClusterStatus or tpctl already counts their request as finished.
  PublishStats();
  for (SequenceUpdate& update : updates) {
    Sequence* seq = update.finished.get();
    if (seq == nullptr) continue;
    if (!update.error.ok()) {
      seq->handle->Fail(seq->sample, update.error);
    } else if (seq->kind == Sequence::Kind::kScore) {
      seq->handle->FinishScore(seq->sample, std::move(seq->score_logits), seq->prompt_len);
    } else {
      seq->handle->Finish(seq->sample, *seq->finish_reason, seq->prompt_len, seq->num_generated(),
                          std::max(seq->cached_prompt_tokens, 0),
                          seq->output != nullptr ? seq->output->MatchedStop() : std::string());
    }
  }
}

void Engine::RecordQueueTimes(const ScheduledBatch& batch) {
  Metrics* metrics = metrics_.load();
  const absl::Time now = absl::Now();
  for (const ScheduledBatch::Entry& entry : batch.entries) {
    Sequence& seq = *entry.seq;
    if (seq.first_scheduled != absl::InfinitePast()) continue;
    seq.first_scheduled = now;
    if (metrics != nullptr) {
      metrics->ObserveRequestQueueTime(absl::ToDoubleSeconds(now - seq.arrival));
    }
  }
}

void Engine::Fail(Sequence& seq, const absl::Status& status) {
  LogWarning(kLog, "request %d: sample %d failed: %s", seq.request_id, seq.sample,
             status.ToString());
  seq.handle->Fail(seq.sample, status);
  if (Metrics* metrics = metrics_.load(); metrics != nullptr) metrics->AddRequestSuccess("abort");
}

void Engine::FailAll(const absl::Status& status) {
  holding_ = false;
  {
    absl::MutexLock lock(&mutex_);
    for (auto& seq : submitted_) scheduler_.Add(std::move(seq));
    submitted_.clear();
  }
  for (std::unique_ptr<Sequence>& seq : scheduler_.TakeAll()) Fail(*seq, status);
}

}  // namespace tpserve
