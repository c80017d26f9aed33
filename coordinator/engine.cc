#include "coordinator/engine.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "engine";

absl::Status CheckSampling(const v1::SamplingParams& s) {
  auto bad = [](const char* field, float value, const char* rule) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.", field, " = ", value, " is invalid: ", rule));
  };
  if (!std::isfinite(s.temperature()) || s.temperature() < 0) {
    return bad("temperature", s.temperature(), "must be >= 0");
  }
  if (s.top_k() < 0) return bad("top_k", s.top_k(), "must be >= 0 (0 disables it)");
  if (!(s.top_p() > 0 && s.top_p() <= 1)) return bad("top_p", s.top_p(), "must be in (0, 1]");
  if (!(s.min_p() >= 0 && s.min_p() <= 1)) return bad("min_p", s.min_p(), "must be in [0, 1]");
  // Bounded so that penalized logits stay finite (logit / 1e-40 would be +inf).
  if (!(s.repetition_penalty() >= 0.01f && s.repetition_penalty() <= 100.0f)) {
    return bad("repetition_penalty", s.repetition_penalty(),
               "must be in [0.01, 100] (1 disables it)");
  }
  if (!(s.presence_penalty() >= -2.0f && s.presence_penalty() <= 2.0f)) {
    return bad("presence_penalty", s.presence_penalty(), "must be in [-2, 2]");
  }
  if (!(s.frequency_penalty() >= -2.0f && s.frequency_penalty() <= 2.0f)) {
    return bad("frequency_penalty", s.frequency_penalty(), "must be in [-2, 2]");
  }
  return absl::OkStatus();
}

}  // namespace

Engine::Engine(EngineOptions options, WorkerPool* pool, const Tokenizer* tokenizer)
    : options_(options), pool_(pool), tokenizer_(tokenizer), blocks_(options.num_blocks) {
  TP_CHECK(options_.block_size > 0 && options_.max_batch_size > 0);
  TP_CHECK(options_.context_length > 0 && options_.vocab_size > 0);
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
  absl::MutexLock lock(&mutex_);
  if (!degraded_.ok()) return;
  degraded_ = absl::UnavailableError(absl::StrCat("cluster degraded: ", cause.message()));
  LogError(kLog, "%s; re-forming the group is not implemented: restart the cluster",
           degraded_.message());
}

absl::Status Engine::health() const {
  absl::MutexLock lock(&mutex_);
  if (stopping_) return absl::UnavailableError("coordinator is shutting down");
  return degraded_;
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

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::SubmitGenerate(GenerateParams params) {
  RETURN_IF_ERROR(CheckPrompt(params.prompt));
  if (params.max_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens = ", params.max_tokens, " is negative"));
  }
  RETURN_IF_ERROR(CheckSampling(params.sampling));
  for (int32_t id : params.stop_token_ids) {
    if (id < 0 || id >= tokenizer_->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stop token ", id, " is outside the vocabulary [0, ", tokenizer_->vocab_size(), ")"));
    }
  }
  auto seq = std::make_unique<Sequence>();
  seq->kind = Sequence::Kind::kGenerate;
  seq->tokens = params.prompt;
  seq->prompt_len = static_cast<int32_t>(params.prompt.size());
  seq->params = std::move(params);
  seq->params.prompt.clear();  // kept once, in tokens
  return Enqueue(std::move(seq));
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
  seq->params.sampling.set_top_p(1);
  seq->params.sampling.set_repetition_penalty(1);
  return Enqueue(std::move(seq));
}

absl::StatusOr<std::shared_ptr<RequestStream>> Engine::Enqueue(std::unique_ptr<Sequence> seq) {
  absl::MutexLock lock(&mutex_);
  if (stopping_) return absl::UnavailableError("coordinator is shutting down");
  if (!degraded_.ok()) return degraded_;
  seq->request_id = next_request_id_++;
  seq->arrival = absl::Now();
  seq->stream = std::make_shared<RequestStream>(seq->request_id);
  std::shared_ptr<RequestStream> stream = seq->stream;
  if (seq->kind == Sequence::Kind::kScore) {
    LogInfo(kLog, "request %d: score, %d prompt tokens", seq->request_id, seq->prompt_len);
  } else {
    LogInfo(kLog, "request %d: generate, %d prompt tokens, max_tokens %d", seq->request_id,
            seq->prompt_len, seq->params.max_tokens);
  }
  submitted_.push_back(std::move(seq));
  return stream;
}

void Engine::Run() {
  for (;;) {
    PublishBlockUsage();
    if (!TakeSubmitted()) break;
    absl::Status health;
    {
      absl::MutexLock lock(&mutex_);
      health = degraded_;
    }
    if (!health.ok()) {
      FailAll(health);
      continue;
    }
    DropCancelled();
    ScheduledBatch batch = Schedule();
    PublishBlockUsage();
    if (batch.empty()) continue;
    ++step_id_;
    const int64_t deadline_ms = absl::ToUnixMillis(absl::Now() + options_.step_timeout);
    absl::StatusOr<v1::StepResponse> response =
        pool_->Step(ToStepRequest(batch, step_id_, deadline_ms), options_.step_timeout);
    if (!response.ok()) {
      MarkDegraded(response.status());
      continue;  // the next iteration fails everything
    }
    Apply(batch, *response);
  }
  FailAll(absl::UnavailableError("coordinator is shutting down"));
  PublishBlockUsage();
}

void Engine::PublishBlockUsage() {
  blocks_used_.store(blocks_.num_blocks() - blocks_.num_free(), std::memory_order_relaxed);
}

bool Engine::TakeSubmitted() {
  const bool idle = waiting_.empty() && running_.empty();
  absl::MutexLock lock(&mutex_);
  if (idle) {
    auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return stopping_ || !submitted_.empty();
    };
    mutex_.Await(absl::Condition(&wake));
  }
  for (auto& seq : submitted_) waiting_.push_back(std::move(seq));
  submitted_.clear();
  return !stopping_;
}

void Engine::Release(Sequence& seq) {
  blocks_.Free(seq.block_ids);
  seq.block_ids.clear();
  if (seq.known_to_workers) finished_seq_ids_.push_back(seq.seq_id);
  seq.known_to_workers = false;
  seq.num_computed = 0;
}

std::unique_ptr<Sequence> Engine::TakeRunning(size_t index) {
  std::unique_ptr<Sequence> seq = std::move(running_[index]);
  running_.erase(running_.begin() + index);
  return seq;
}

void Engine::DropCancelled() {
  auto drop = [this](std::unique_ptr<Sequence> seq) {
    Release(*seq);
    LogInfo(kLog, "request %d: cancelled by the client after %d tokens", seq->request_id,
            seq->num_generated());
    seq->stream->Fail(absl::CancelledError("cancelled by the client"));
  };
  for (size_t i = 0; i < running_.size();) {
    if (running_[i]->stream->cancelled()) {
      drop(TakeRunning(i));
    } else {
      ++i;
    }
  }
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->stream->cancelled()) {
      drop(std::move(*it));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

void Engine::PreemptLast() {
  std::unique_ptr<Sequence> seq = TakeRunning(running_.size() - 1);
  LogInfo(kLog, "request %d: preempted for lack of KV blocks; will recompute %d tokens",
          seq->request_id, seq->tokens.size());
  Release(*seq);
  waiting_.push_front(std::move(seq));
}

ScheduledBatch Engine::Schedule() {
  ScheduledBatch batch;
  // Decode: every running sequence runs its newest token.
  bool preempted = false;
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& seq = *running_[i];
    const int32_t needed =
        BlocksFor(seq.tokens.size()) - static_cast<int32_t>(seq.block_ids.size());
    std::vector<int32_t> new_blocks;
    if (needed > 0) {
      std::optional<std::vector<int32_t>> ids;
      while (!(ids = blocks_.Allocate(needed)) && i < running_.size()) {
        PreemptLast();
        preempted = true;
      }
      if (i >= running_.size()) break;  // `seq` itself was preempted
      new_blocks = std::move(*ids);
      seq.block_ids.insert(seq.block_ids.end(), new_blocks.begin(), new_blocks.end());
    }
    batch.entries.push_back({&seq, false, seq.num_computed, std::move(new_blocks)});
  }
  // Admit waiting sequences FCFS: the whole prompt (or everything, after preemption) at once.
  // Not in a step that had to preempt: the pool is full, admitting would only thrash.
  int64_t prefill_tokens = 0;
  while (!preempted && !waiting_.empty() &&
         static_cast<int32_t>(running_.size()) < options_.max_batch_size) {
    Sequence& seq = *waiting_.front();
    const int64_t n = static_cast<int64_t>(seq.tokens.size());
    if (prefill_tokens > 0 && prefill_tokens + n > options_.max_prefill_tokens) break;
    std::optional<std::vector<int32_t>> ids = blocks_.Allocate(BlocksFor(n));
    if (!ids) break;
    prefill_tokens += n;
    seq.block_ids = *ids;
    seq.seq_id = next_seq_id_++;
    seq.known_to_workers = true;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    batch.entries.push_back({&seq, true, 0, std::move(*ids)});
  }
  batch.finished_seq_ids = std::move(finished_seq_ids_);
  finished_seq_ids_.clear();
  if (batch.empty()) {
    finished_seq_ids_ = std::move(batch.finished_seq_ids);  // nothing to send them with yet
    batch.finished_seq_ids.clear();
  }
  return batch;
}

void Engine::Apply(const ScheduledBatch& batch, const v1::StepResponse& response) {
  absl::flat_hash_map<uint64_t, const v1::SequenceOutput*> outputs;
  for (const v1::SequenceOutput& output : response.outputs()) outputs[output.seq_id()] = &output;

  std::vector<Sequence*> done;  // finished (or failed) this step
  for (const ScheduledBatch::Entry& entry : batch.entries) {
    Sequence& seq = *entry.seq;
    seq.num_computed = static_cast<int32_t>(seq.tokens.size());
    auto it = outputs.find(seq.seq_id);
    const v1::SequenceOutput* output = it == outputs.end() ? nullptr : it->second;

    if (seq.kind == Sequence::Kind::kScore) {
      const int64_t expected = static_cast<int64_t>(seq.tokens.size()) * options_.vocab_size;
      if (output == nullptr || output->logits_size() != expected) {
        seq.stream->Fail(absl::InternalError(
            absl::StrCat("rank 0 returned ", output == nullptr ? 0 : output->logits_size(),
                         " logits for step ", response.step_id(), ", expected ", expected)));
      } else {
        seq.stream->FinishScore({output->logits().begin(), output->logits().end()}, seq.prompt_len);
        LogInfo(kLog, "request %d: scored %d positions in %.3f s", seq.request_id, seq.prompt_len,
                absl::ToDoubleSeconds(absl::Now() - seq.arrival));
      }
      done.push_back(&seq);
      continue;
    }

    if (output == nullptr || output->token_id() < 0 ||
        output->token_id() >= tokenizer_->vocab_size()) {
      const std::string what =
          output == nullptr ? "no token" : absl::StrCat("token ", output->token_id());
      LogError(kLog, "request %d: rank 0 returned %s in step %d", seq.request_id, what,
               response.step_id());
      seq.stream->Fail(absl::InternalError(
          absl::StrCat("rank 0 returned ", what, " for step ", response.step_id())));
      done.push_back(&seq);
      continue;
    }
    const int32_t token = output->token_id();
    seq.tokens.push_back(token);
    const GenerateParams& p = seq.params;
    const bool stop_token = (!p.ignore_eos && tokenizer_->IsEndOfGeneration(token)) ||
                            std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
                                p.stop_token_ids.end();
    std::optional<FinishReason> finish;
    if (stop_token) {
      finish = FinishReason::kStop;
    } else {
      seq.stream->Push(token);
      const int64_t n = static_cast<int64_t>(seq.tokens.size());
      if ((p.max_tokens > 0 && seq.num_generated() >= p.max_tokens) ||
          n >= options_.context_length || BlocksFor(n) > options_.num_blocks) {
        finish = FinishReason::kLength;
      }
    }
    if (finish.has_value()) {
      seq.stream->Finish(*finish, seq.prompt_len, seq.num_generated());
      LogInfo(kLog, "request %d: finished (%s), %d prompt + %d generated tokens in %.3f s",
              seq.request_id, FinishReasonName(*finish), seq.prompt_len, seq.num_generated(),
              absl::ToDoubleSeconds(absl::Now() - seq.arrival));
      done.push_back(&seq);
    }
  }
  for (Sequence* seq : done) {
    auto it = std::find_if(running_.begin(), running_.end(),
                           [seq](const auto& s) { return s.get() == seq; });
    TP_CHECK(it != running_.end());
    std::unique_ptr<Sequence> finished = TakeRunning(it - running_.begin());
    Release(*finished);
  }
}

void Engine::FailAll(const absl::Status& status) {
  {
    absl::MutexLock lock(&mutex_);
    for (auto& seq : submitted_) waiting_.push_back(std::move(seq));
    submitted_.clear();
  }
  auto fail = [&](Sequence& seq) {
    LogWarning(kLog, "request %d: failed: %s", seq.request_id, status.ToString());
    seq.stream->Fail(status);
    blocks_.Free(seq.block_ids);
    seq.block_ids.clear();
  };
  for (auto& seq : running_) fail(*seq);
  for (auto& seq : waiting_) fail(*seq);
  running_.clear();
  waiting_.clear();
  // The workers' state is unknown now; a re-formed group starts from scratch.
  finished_seq_ids_.clear();
}

}  // namespace tpserve
