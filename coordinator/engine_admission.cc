// Engine's front door (engine.h): the checks a request passes before it is queued, the compile of
// its output constraint, and the queue limits, draining included. Front-end threads run these.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/engine.h"
#include "coordinator/openai_error.h"
#include "coordinator/output_processor.h"
#include "coordinator/sample_mask.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "engine";

}  // namespace

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
  const RequestLimits& limits = options_.limits;
  RETURN_IF_ERROR(CheckSampleCount(params.n, limits));
  if (params.logprobs != -1) RETURN_IF_ERROR(CheckLogprobs(params.logprobs, "logprobs"));
  RETURN_IF_ERROR(CheckStopStrings(params.stop, limits));
  if (params.stop_token_ids.size() > static_cast<size_t>(limits.max_stop_token_ids)) {
    return WithParam(absl::InvalidArgumentError(absl::StrCat(
                         "stop_token_ids holds ", params.stop_token_ids.size(), " ids; at most ",
                         limits.max_stop_token_ids, " are allowed (--max-stop-token-ids)")),
                     "stop_token_ids");
  }
  if (params.min_tokens < 0 || (params.max_tokens > 0 && params.min_tokens > params.max_tokens)) {
    return WithParam(absl::InvalidArgumentError(
                         absl::StrCat("min_tokens = ", params.min_tokens,
                                      " is outside [0, max_tokens = ", params.max_tokens, "]")),
                     "min_tokens");
  }
  // Token ids a request names: each in the vocabulary.
  auto check_ids = [this](absl::Span<const int32_t> ids, const char* what,
                          const char* param) -> absl::Status {
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer_->vocab_size()) {
        return WithParam(
            absl::InvalidArgumentError(absl::StrCat(
                what, " ", id, " is outside the vocabulary [0, ", tokenizer_->vocab_size(), ")")),
            param);
      }
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(check_ids(params.allowed_token_ids, "allowed token", "allowed_token_ids"));
  if (params.logit_bias.size() > static_cast<size_t>(limits.max_logit_bias)) {
    return WithParam(absl::InvalidArgumentError(absl::StrCat(
                         "logit_bias holds ", params.logit_bias.size(), " entries; at most ",
                         limits.max_logit_bias, " are allowed (--max-logit-bias)")),
                     "logit_bias");
  }
  for (size_t i = 0; i < params.logit_bias.size(); ++i) {
    const auto [token, bias] = params.logit_bias[i];
    const bool repeated = std::any_of(params.logit_bias.begin(), params.logit_bias.begin() + i,
                                      [token = token](const auto& b) { return b.first == token; });
    if (token < 0 || token >= tokenizer_->vocab_size() || repeated ||
        !(bias >= -100 && bias <= 100)) {
      return WithParam(absl::InvalidArgumentError(absl::StrCat(
                           "logit_bias: ", bias, " for token ", token,
                           " (each a token of the vocabulary, once, with a bias in [-100, 100])")),
                       "logit_bias");
    }
  }
  for (const std::vector<int32_t>& word : params.bad_words_ids) {
    if (word.empty())
      return WithParam(absl::InvalidArgumentError("a bad word is empty"), "bad_words");
    RETURN_IF_ERROR(check_ids(word, "bad word token", "bad_words"));
  }
  RETURN_IF_ERROR(params.sampling.Validate());
  return check_ids(params.stop_token_ids, "stop token", "stop_token_ids");
}

absl::StatusOr<std::shared_ptr<RequestHandle>> Engine::SubmitGenerate(
    GenerateParams params, const std::function<bool()>& client_gone) {
  RETURN_IF_ERROR(CheckGenerate(params));
  if (params.constraint.active()) {
    // Off the engine thread, within the compile timeout.
    absl::StatusOr<std::shared_ptr<const CompiledConstraint>> compiled =
        constraints_.Compile(params.constraint, client_gone);
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
    seq->output = std::make_unique<OutputProcessor>(*tokenizer_, params);
    if (params.compiled_constraint != nullptr) {
      seq->token_matcher = std::make_unique<TokenMatcher>(params.compiled_constraint);
    }
    if (i == 0) {
      // Rank 0 cannot draw from an empty allow-list: a request whose first token has none (an
      // empty language, no allowed token the constraint allows) is refused here; one that runs
      // out later ends that sample alone (Scheduler::Postprocess).
      RETURN_IF_ERROR(
          UpdateSampleMask(*seq, tokenizer_->end_of_generation_ids(), options_.vocab_size));
    } else {
      seq->mask = samples.front()->mask;
    }
    samples.push_back(std::move(seq));
  }
  return Enqueue(std::move(samples));
}

absl::StatusOr<std::shared_ptr<RequestHandle>> Engine::SubmitScore(std::vector<int32_t> prompt,
                                                                   int32_t adapter,
                                                                   int64_t adapter_generation) {
  RETURN_IF_ERROR(CheckPrompt(prompt));
  const int64_t bytes = static_cast<int64_t>(prompt.size()) * options_.vocab_size * 4;
  if (bytes > kMaxScoreLogitBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "scoring ", prompt.size(), " positions returns ", bytes, " bytes of logits; at most ",
        kMaxScoreLogitBytes / (options_.vocab_size * 4), " positions fit one message"));
  }
  auto seq = std::make_unique<Sequence>();
  seq->kind = Sequence::Kind::kScore;
  seq->params.adapter = adapter;
  seq->params.adapter_generation = adapter_generation;
  seq->prompt_len = static_cast<int32_t>(prompt.size());
  seq->tokens = std::move(prompt);
  std::vector<std::unique_ptr<Sequence>> one;
  one.push_back(std::move(seq));
  return Enqueue(std::move(one));
}

absl::StatusOr<std::shared_ptr<RequestHandle>> Engine::Enqueue(
    std::vector<std::unique_ptr<Sequence>> samples) {
  const int32_t queued = stats().num_waiting;
  absl::MutexLock lock(&mutex_);
  if (stopping_) return absl::UnavailableError("coordinator is shutting down");
  // While requests are held for a lost rank, new ones may queue behind them, but only up to a
  // limit: without one they are refused.
  if (!recovery_state_.serving() &&
      (options_.max_queued_requests == 0 || !recovery_state_.WithinGrace())) {
    return HealthLocked();
  }
  if (draining_) return absl::UnavailableError(drain_reason_);
  const int64_t waiting = queued + static_cast<int64_t>(submitted_.size());
  if (options_.max_queued_requests > 0 && waiting >= options_.max_queued_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server has ", waiting, " requests waiting (--max-queued-requests ",
                     options_.max_queued_requests, "); retry in about a second"));
  }
  for (std::unique_ptr<Sequence>& seq : samples) {
    ASSIGN_OR_RETURN(seq->adapter_use,
                     adapters_.Use(seq->params.adapter, seq->params.adapter_generation));
  }
  const uint64_t request_id = next_request_id_++;
  const absl::Time now = absl::Now();
  auto handle = std::make_shared<RequestHandle>(request_id, static_cast<int32_t>(samples.size()));
  for (size_t i = 0; i < samples.size(); ++i) {
    Sequence& seq = *samples[i];
    seq.request_id = request_id;
    seq.arrival = now;
    seq.handle = handle;
    seq.sample = static_cast<int32_t>(i);
  }
  const Sequence& first = *samples.front();
  if (first.kind == Sequence::Kind::kScore) {
    LogInfo(kLog, "request %d: score, %d prompt tokens", request_id, first.prompt_len);
  } else {
    LogInfo(kLog, "request %d: generate, %d prompt tokens, max_tokens %d, n %d", request_id,
            first.prompt_len, first.params.max_tokens, samples.size());
  }
  for (auto& seq : samples) submitted_.push_back(std::move(seq));
  SetSubmitted(static_cast<int32_t>(submitted_.size()));
  return handle;
}

int32_t Engine::Drain(std::string why, bool until_reformed) {
  const EngineStats s = stats();
  absl::MutexLock lock(&mutex_);
  if (!draining_) LogInfo(kLog, "draining: new requests are refused from now on (%s)", why);
  // A drain for shutdown or by an operator outlasts a re-formation.
  undrain_when_reformed_ = until_reformed && (!draining_ || undrain_when_reformed_);
  draining_ = true;
  drain_reason_ = std::move(why);
  return s.num_running + s.num_waiting + static_cast<int32_t>(submitted_.size());
}

bool Engine::WaitIdle(absl::Time deadline) const {
  absl::MutexLock lock(&mutex_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return idle_ && submitted_.empty(); };
  return mutex_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

void Engine::Undrain() {
  absl::MutexLock lock(&mutex_);
  if (draining_) LogInfo(kLog, "undrained: admitting requests again");
  draining_ = false;
  undrain_when_reformed_ = false;
}

void Engine::FailInFlight(const absl::Status& status) {
  absl::MutexLock lock(&mutex_);
  fail_requested_ = status;
}

bool Engine::draining() const {
  absl::MutexLock lock(&mutex_);
  return draining_;
}

}  // namespace tpserve
