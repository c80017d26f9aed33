#include "coordinator/engine.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/openai_error.h"
#include "coordinator/radix_cache.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "engine";

// A step's work in the units its time grows with: every token's linears, plus its attention
// over the context so far, a 1,024-token context counting as much again.
double StepWork(const ScheduledBatch& batch) {
  double work = 1.0;  // the step's fixed cost (plan, RPC, sampling)
  for (const ScheduledBatch::Entry& e : batch.entries) {
    work += e.num_tokens * (1.0 + (e.start + e.num_tokens) / 1024.0);
  }
  return work;
}

// How much slower than so far a step may run before it counts as stuck.
constexpr double kStepDeadlineMargin = 8.0;
// Compiled grammars kept for requests that repeat a schema (xgrammar evicts the least recent).
constexpr int64_t kGrammarCacheBytes = int64_t{256} << 20;

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
  return s;
}

}  // namespace

Engine::Engine(EngineOptions options, WorkerPool* pool, const Tokenizer* tokenizer)
    : options_(options),
      pool_(pool),
      tokenizer_(tokenizer),
      jump_forward_(options.jump_forward ? std::make_unique<JumpForward>(*tokenizer) : nullptr),
      blocks_(options.num_blocks),
      cache_(options.enable_prefix_cache
                 ? std::unique_ptr<PrefixCache>(
                       std::make_unique<RadixCache>(options.block_size, &blocks_))
                 : std::make_unique<NoPrefixCache>()),
      scheduler_(ToSchedulerOptions(options, *tokenizer, jump_forward_.get()), &blocks_,
                 cache_.get()) {
  TP_CHECK(options_.block_size > 0 && options_.max_num_seqs > 0);
  TP_CHECK(options_.max_num_batched_tokens > 0);
  TP_CHECK(options_.context_length > 0 && options_.vocab_size > 0);
  PublishStats();
}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  TP_CHECK(!thread_.joinable());
  thread_ = std::thread([this] { Run(); });
}

void Engine::Stop() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Engine::MarkDegraded(const absl::Status& cause) {
  TP_CHECK(!cause.ok());
  absl::Status degraded;
  {
    absl::MutexLock lock(&mutex_);
    if (!degraded_.ok()) return;
    degraded_ = absl::UnavailableError(absl::StrCat("cluster degraded: ", cause.message()));
    degraded_since_ = absl::Now();
    waiting_for_ = absl::StrCat("the group to re-form after ", cause.message());
    LogError(kLog, "%s", degraded_.message());
    degraded = degraded_;
  }
  // A step waiting on a rank that is gone would hold its requests until the step deadline.
  pool_->AbandonStep(degraded);
}

void Engine::SetGroupReformer(std::function<absl::Status()> reform) { reform_ = std::move(reform); }

bool Engine::TryReform() {
  const absl::Status status = reform_();
  if (!status.ok()) {
    if (status.ToString() != last_reform_error_) {
      LogWarning(kLog, "the collective group is not re-formed yet: %s", status.ToString());
      last_reform_error_ = status.ToString();
      absl::MutexLock lock(&mutex_);
      waiting_for_ = std::string(absl::StripPrefix(status.message(), "waiting for "));
    }
    return false;
  }
  last_reform_error_.clear();
  // A restarted rank lost its KV pool, and the step ids restart with the group.
  cache_->EvictAll();
  step_id_ = 0;
  const absl::Time now = absl::Now();
  absl::Duration degraded_for;
  absl::Status late;
  {
    absl::MutexLock lock(&mutex_);
    if (!WithinGrace(now)) late = GraceExpired(degraded_);
    degraded_for = now - degraded_since_;
    LogInfo(kLog, "the collective group is re-formed after %.2f s: serving again (was %s)",
            absl::ToDoubleSeconds(degraded_for), degraded_.message());
    degraded_ = absl::OkStatus();
    waiting_for_.clear();
  }
  ++recovery_.recoveries;
  if (Metrics* metrics = metrics_.load(); metrics != nullptr) {
    metrics->ObserveRecoveryTime(absl::ToDoubleSeconds(degraded_for));
  }
  if (!late.ok()) FailHeld(late);
  ResumeHeld(now);
  return true;
}

absl::Status Engine::GraceExpired(const absl::Status& cause) const {
  if (options_.recovery_grace == absl::ZeroDuration()) return cause;
  return absl::UnavailableError(
      absl::StrCat(cause.message(), "; the group did not re-form within the recovery grace of ",
                   absl::FormatDuration(options_.recovery_grace)));
}

bool Engine::WithinGrace(absl::Time now) const {
  return !degraded_.ok() && now - degraded_since_ < options_.recovery_grace;
}

absl::Status Engine::health() const {
  absl::MutexLock lock(&mutex_);
  return HealthLocked();
}

absl::Status Engine::HealthLocked() const {
  if (stopping_) return absl::UnavailableError("coordinator is shutting down");
  const absl::Time now = absl::Now();
  if (!WithinGrace(now)) return degraded_;
  return absl::UnavailableError(
      absl::StrCat(degraded_.message(), "; requests in flight are held for ",
                   absl::FormatDuration(absl::Trunc(
                       options_.recovery_grace - (now - degraded_since_), absl::Milliseconds(100))),
                   " more, waiting for ", waiting_for_));
}

std::optional<Engine::Pause> Engine::pause() const {
  absl::MutexLock lock(&mutex_);
  const absl::Time now = absl::Now();
  if (stopping_ || degraded_.ok() || !(WithinGrace(now) || holding_.load())) return std::nullopt;
  return Pause{waiting_for_,
               std::max(absl::ZeroDuration(), options_.recovery_grace - (now - degraded_since_))};
}

absl::Duration Engine::StepTimeout(double work) const {
  return std::max(options_.step_timeout,
                  absl::Seconds(kStepDeadlineMargin * seconds_per_work_ * work));
}

int32_t Engine::BlocksFor(int64_t num_tokens) const {
  return static_cast<int32_t>((num_tokens + options_.block_size - 1) / options_.block_size);
}

absl::Status Engine::CheckPrompt(const std::vector<int32_t>& prompt) const {
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt is empty");
  const int32_t vocab = tokenizer_->vocab_size();
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", prompt[i], " at position ", i,
                                                     " is outside the vocabulary [0, ", vocab,
                                                     ")"));
    }
  }
  if (static_cast<int64_t>(prompt.size()) > options_.context_length) {
    return absl::InvalidArgumentError(absl::StrCat("the prompt has ", prompt.size(),
                                                   " tokens; the model's context length is ",
                                                   options_.context_length));
  }
  if (BlocksFor(prompt.size()) > options_.num_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the prompt has ", prompt.size(), " tokens, which need ", BlocksFor(prompt.size()),
        " KV blocks of ", options_.block_size, " tokens; the cluster holds ", options_.num_blocks));
  }
  return absl::OkStatus();
}

absl::Status Engine::CheckGenerate(const GenerateParams& params) const {
  RETURN_IF_ERROR(CheckPrompt(params.prompt));
  if (params.max_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens = ", params.max_tokens, " is negative"));
  }
  if (params.max_tokens > 0 &&
      static_cast<int64_t>(params.prompt.size()) + params.max_tokens > options_.context_length) {
    return WithParam(absl::InvalidArgumentError(absl::StrCat(
                         "this model's maximum context length is ", options_.context_length,
                         " tokens; the request asks for ", params.prompt.size() + params.max_tokens,
                         " (", params.prompt.size(), " in the prompt, ", params.max_tokens,
                         " in the completion): lower max_tokens or shorten the prompt")),
                     "max_tokens");
  }
  if (params.n < 1 || params.n > kMaxSamples) {
    return absl::InvalidArgumentError(
        absl::StrCat("n = ", params.n, " is outside [1, ", kMaxSamples, "]"));
  }
  if (params.logprobs < -1 || params.logprobs > kMaxLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs = ", params.logprobs, " is outside [0, ", kMaxLogprobs, "]"));
  }
  if (params.stop.size() > static_cast<size_t>(kMaxStopStrings)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stop has ", params.stop.size(), " strings; at most ", kMaxStopStrings));
  }
  for (size_t i = 0; i < params.stop.size(); ++i) {
    if (params.stop[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "] is empty"));
    }
  }
  RETURN_IF_ERROR(params.sampling.Validate());
  for (int32_t id : params.stop_token_ids) {
    if (id < 0 || id >= tokenizer_->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stop token ", id, " is outside the vocabulary [0, ", tokenizer_->vocab_size(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::shared_ptr<RequestStream>>> Engine::SubmitGenerate(
    GenerateParams params) {
  RETURN_IF_ERROR(CheckGenerate(params));
  if (params.constraint.active()) {
    // On the caller's thread: the engine thread never waits for a compile.
    GrammarCompiler* compiler;
    {
      absl::MutexLock lock(&grammar_mutex_);
      if (grammar_ == nullptr) {
        grammar_ = std::make_unique<GrammarCompiler>(*tokenizer_, kGrammarCacheBytes);
      }
      compiler = grammar_.get();  // lives as long as the engine; compiles may run side by side
    }
    absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
        compiler->Compile(params.constraint);
    if (!compiled.ok()) return WithParam(compiled.status(), params.constraint.param);
    params.compiled_constraint = *std::move(compiled);
  }
  std::vector<std::unique_ptr<Sequence>> samples;
  std::shared_ptr<SampleGroup> group = params.n > 1 ? std::make_shared<SampleGroup>() : nullptr;
  for (int32_t i = 0; i < params.n; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->kind = Sequence::Kind::kGenerate;
    seq->tokens = params.prompt;
    seq->prompt_len = static_cast<int32_t>(params.prompt.size());
    seq->params = params;
    seq->params.prompt.clear();  // kept once per sample, in tokens
    seq->params.sampling.seed = params.sampling.seed + i;
    seq->group = group;
    seq->group_leader = group != nullptr && i == 0;
    seq->detokenizer = std::make_unique<IncrementalDetokenizer>(*tokenizer_);
    seq->stop_matcher = std::make_unique<StopStringMatcher>(params.stop);
    if (params.compiled_constraint != nullptr) {
      seq->token_matcher = std::make_unique<TokenMatcher>(params.compiled_constraint);
    }
    samples.push_back(std::move(seq));
  }
  return Enqueue(std::move(samples));
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::SubmitScore(std::vector<int32_t> prompt) {
  RETURN_IF_ERROR(CheckPrompt(prompt));
  const int64_t bytes = static_cast<int64_t>(prompt.size()) * options_.vocab_size * 4;
  if (bytes > kMaxScoreLogitBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scoring ", prompt.size(), " positions returns ", bytes, " bytes of logits; at most ",
        kMaxScoreLogitBytes / (options_.vocab_size * 4), " positions fit one message"));
  }
  auto seq = std::make_unique<Sequence>();
  seq->kind = Sequence::Kind::kScore;
  seq->prompt_len = static_cast<int32_t>(prompt.size());
  seq->tokens = std::move(prompt);
  std::vector<std::unique_ptr<Sequence>> one;
  one.push_back(std::move(seq));
  ASSIGN_OR_RETURN(std::vector<std::shared_ptr<RequestStream>> streams, Enqueue(std::move(one)));
  return streams.front();
}

absl::StatusOr<std::vector<std::shared_ptr<RequestStream>>> Engine::Enqueue(
    std::vector<std::unique_ptr<Sequence>> samples) {
  const int32_t queued = stats().num_waiting;
  absl::MutexLock lock(&mutex_);
  if (stopping_) return absl::UnavailableError("coordinator is shutting down");
  // While requests are held for a lost rank, new ones may queue behind them, but only up to a
  // limit: without one they are refused.
  if (!degraded_.ok() && (options_.max_queued_requests == 0 || !WithinGrace(absl::Now()))) {
    return HealthLocked();
  }
  if (draining_) {
    return absl::UnavailableError(
        "the server is draining: it finishes the requests it has and "
        "accepts no new ones");
  }
  const int64_t waiting = queued + static_cast<int64_t>(submitted_.size());
  if (options_.max_queued_requests > 0 && waiting >= options_.max_queued_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server has ", waiting, " requests waiting (--max-queued-requests ",
                     options_.max_queued_requests, "); retry in about a second"));
  }
  const uint64_t request_id = next_request_id_++;
  const absl::Time now = absl::Now();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < samples.size(); ++i) {
    Sequence& seq = *samples[i];
    seq.request_id = request_id;
    seq.arrival = now;
    seq.stream = std::make_shared<RequestStream>(request_id, static_cast<int32_t>(i));
    streams.push_back(seq.stream);
  }
  const Sequence& first = *samples.front();
  if (first.kind == Sequence::Kind::kScore) {
    LogInfo(kLog, "request %d: score, %d prompt tokens", request_id, first.prompt_len);
  } else {
    LogInfo(kLog, "request %d: generate, %d prompt tokens, max_tokens %d, n %d", request_id,
            first.prompt_len, first.params.max_tokens, samples.size());
  }
  for (auto& seq : samples) submitted_.push_back(std::move(seq));
  return streams;
}

int32_t Engine::Drain() {
  const EngineStats s = stats();
  absl::MutexLock lock(&mutex_);
  if (!draining_) LogInfo(kLog, "draining: new requests are refused from now on");
  draining_ = true;
  return s.num_running + s.num_waiting + static_cast<int32_t>(submitted_.size());
}

void Engine::Undrain() {
  absl::MutexLock lock(&mutex_);
  if (draining_) LogInfo(kLog, "undrained: admitting requests again");
  draining_ = false;
}

bool Engine::draining() const {
  absl::MutexLock lock(&mutex_);
  return draining_;
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
    absl::Status health;
    {
      absl::MutexLock lock(&mutex_);
      health = degraded_;
    }
    if (!health.ok()) {
      bool hold;
      {
        absl::MutexLock lock(&mutex_);
        hold = WithinGrace(absl::Now());
      }
      if (hold) {
        HoldAll(health);
      } else {
        FailAll(GraceExpired(health));
      }
      ran = false;
      if (reform_ != nullptr && !TryReform()) {
        absl::MutexLock lock(&mutex_);
        mutex_.AwaitWithTimeout(absl::Condition(&stopping_), kReformRetry);
      }
      continue;
    }
    DropCancelled();
    ScheduledBatch batch = scheduler_.Schedule();
    ran = !batch.empty();
    if (!ran) continue;
    RecordQueueTimes(batch);
    PublishStats();
    ++step_id_;
    const double work = StepWork(batch);
    const absl::Duration timeout = StepTimeout(work);
    const absl::Time started = absl::Now();
    const int64_t deadline_ms = absl::ToUnixMillis(started + timeout);
    absl::StatusOr<v1::StepResponse> response =
        pool_->Step(ToStepRequest(batch, step_id_, deadline_ms), timeout);
    if (!response.ok()) {
      MarkDegraded(response.status());
      continue;  // the next iteration fails everything
    }
    const double measured = absl::ToDoubleSeconds(absl::Now() - started) / work;
    seconds_per_work_ = 0.8 * seconds_per_work_ + 0.2 * measured;
    Apply(batch, *response);
  }
  FailAll(absl::UnavailableError("coordinator is shutting down"));
  PublishStats();
}

EngineStats Engine::stats() const {
  absl::MutexLock lock(&stats_mutex_);
  return stats_;
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
    metrics->SetEngineState(state);
  }
  absl::MutexLock lock(&stats_mutex_);
  stats_ = stats;
}

bool Engine::TakeSubmitted(absl::Duration wait) {
  const bool idle = scheduler_.idle();
  std::vector<std::unique_ptr<Sequence>> submitted;
  {
    absl::MutexLock lock(&mutex_);
    // Degraded with a reformer: wake to re-form the group (the attempts pace themselves).
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return stopping_ || !submitted_.empty() || flush_requested_ != flush_done_ ||
             (reform_ != nullptr && !degraded_.ok());
    };
    if (idle) {
      mutex_.Await(absl::Condition(&wake));
    } else if (wait > absl::ZeroDuration()) {
      mutex_.AwaitWithTimeout(absl::Condition(&wake), wait);
    }
    if (stopping_) return false;
    submitted.swap(submitted_);
  }
  for (auto& seq : submitted) scheduler_.Add(std::move(seq));
  return true;
}

void Engine::DropCancelled() {
  for (std::unique_ptr<Sequence>& seq : scheduler_.TakeCancelled()) {
    LogInfo(kLog, "request %d: cancelled by the client after %d tokens", seq->request_id,
            seq->num_generated());
    seq->stream->Fail(absl::CancelledError("cancelled by the client"));
    if (Metrics* metrics = metrics_.load(); metrics != nullptr) metrics->AddRequestSuccess("abort");
  }
}

void Engine::Apply(const ScheduledBatch& batch, const v1::StepResponse& response) {
  std::vector<SequenceUpdate> updates = scheduler_.Postprocess(batch, response);
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
      seq.stream->Push(token.id, std::move(token.text), std::move(token.logprob));
    }
    if (!update.tail.empty()) seq.stream->PushText(std::move(update.tail));
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
              seq.request_id, seq.stream->index(), FinishReasonName(finish), seq.prompt_len,
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
      seq->stream->Fail(update.error);
    } else if (seq->kind == Sequence::Kind::kScore) {
      seq->stream->FinishScore(std::move(seq->score_logits), seq->prompt_len);
    } else {
      seq->stream->Finish(*seq->finish_reason, seq->prompt_len, seq->num_generated(),
                          std::max(seq->cached_prompt_tokens, 0));
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

void Engine::HoldAll(const absl::Status& cause) {
  DropCancelled();
  FailRepeatedlyHeld(cause);
  scheduler_.RequeueAll();
  holding_ = true;
  const absl::Time now = absl::Now();
  for (const std::unique_ptr<Sequence>& seq : scheduler_.waiting()) {
    if (seq->held_since != absl::InfinitePast()) continue;
    seq->held_since = now;
    ++recovery_.requests_held;
    LogInfo(kLog, "request %d: sample %d held until the group re-forms, %d tokens to recompute",
            seq->request_id, seq->stream->index(), seq->tokens.size());
  }
  // Before the re-formation attempt, which may take long: the queue limit, tpctl and /metrics
  // count the held requests meanwhile.
  PublishStats();
}

void Engine::FailRepeatedlyHeld(const absl::Status& cause) {
  for (const std::unique_ptr<Sequence>& seq : scheduler_.running()) ++seq->holds;
  const int32_t limit = options_.max_request_holds;
  for (std::unique_ptr<Sequence>& seq :
       scheduler_.TakeIf([limit](const Sequence& s) { return s.holds > limit; })) {
    Fail(*seq, absl::InternalError(absl::StrCat("the steps this request ran in failed ", seq->holds,
                                                " times (the last: ", cause.message(),
                                                "); it is not held again")));
  }
}

void Engine::ResumeHeld(absl::Time now) {
  for (const std::unique_ptr<Sequence>& seq : scheduler_.waiting()) {
    if (seq->held_since == absl::InfinitePast()) continue;
    ++recovery_.requests_resumed;
    LogInfo(kLog, "request %d: sample %d resumed after %.2f s held, %d tokens to recompute",
            seq->request_id, seq->stream->index(), absl::ToDoubleSeconds(now - seq->held_since),
            seq->tokens.size());
    seq->held_since = absl::InfinitePast();
  }
  holding_ = false;
}

void Engine::FailHeld(const absl::Status& status) {
  for (std::unique_ptr<Sequence>& seq :
       scheduler_.TakeIf([](const Sequence& s) { return s.held_since != absl::InfinitePast(); })) {
    Fail(*seq, status);
  }
}

void Engine::Fail(Sequence& seq, const absl::Status& status) {
  LogWarning(kLog, "request %d: sample %d failed: %s", seq.request_id, seq.stream->index(),
             status.ToString());
  seq.stream->Fail(status);
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
