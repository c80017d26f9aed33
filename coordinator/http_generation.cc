#include "coordinator/http_generation.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "coordinator/http_replies.h"
#include "coordinator/openai_error.h"
#include "coordinator/prompt_logprobs.h"

namespace tpserve {
namespace {

constexpr char kLog[] = "http";
constexpr char kRequestIdHeader[] = "X-Request-Id";
// The Responses API's store: what a server keeps for previous_response_id at most.
constexpr int64_t kMaxStoredResponses = 4096;
constexpr int64_t kMaxStoredResponseBytes = int64_t{64} << 20;

// ": paused, waiting for ...", one line whatever the cause's text holds.
std::string KeepAliveComment(const std::string& waiting_for) {
  std::string comment = absl::StrCat(": paused, waiting for ", waiting_for);
  for (char& c : comment) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return comment + "\n\n";
}

// Prompt tokens count once however many samples there are; completion tokens add up.
void AddUsage(const StreamUpdate& last, Usage* usage) {
  if (last.index == 0) {
    usage->prompt_tokens = last.prompt_tokens;
    usage->cached_prompt_tokens = last.cached_prompt_tokens;
  }
  usage->completion_tokens += last.completion_tokens;
}

std::string StoppingMessage() { return "the HTTP server is stopping"; }

}  // namespace

HttpGenerations::HttpGenerations(const HttpServerOptions& options, FrontEndPool& pool)
    : options_(options),
      pool_(pool),
      tool_format_(options.chat_template != nullptr
                       ? DetectToolCallFormat(options.chat_template->source())
                       : ToolCallFormat{}),
      responses_(kMaxStoredResponses, kMaxStoredResponseBytes) {}

ServedModel HttpGenerations::Model(const Engine& engine) const {
  ServedModel model = Model();
  model.context_length = engine.options().context_length;
  model.limits = engine.options().limits;
  return model;
}

ServedModel HttpGenerations::Model() const {
  return {options_.model_name,    options_.context_length,   options_.tokenizer,
          options_.chat_template, options_.default_sampling, RequestLimits{},
          tool_format_,           options_.reasoning,        Loras()};
}

std::vector<LoraModule> HttpGenerations::Loras() const {
  return options_.loras != nullptr ? options_.loras->Serving() : std::vector<LoraModule>();
}

bool HttpGenerations::WaitNone(absl::Time deadline) {
  absl::MutexLock lock(&mutex_);
  return mutex_.AwaitWithDeadline(absl::Condition(
                                      +[](int* alive) { return *alive == 0; }, &alive_),
                                  deadline);
}

void HttpGenerations::CutAll() {
  stopping_.store(true);
  std::vector<std::shared_ptr<HttpGeneration>> open;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [key, generation] : open_) open.push_back(generation);
  }
  for (const std::shared_ptr<HttpGeneration>& generation : open) generation->Cut();
}

void HttpGenerations::Add(const std::shared_ptr<HttpGeneration>& generation) {
  absl::MutexLock lock(&mutex_);
  open_[generation.get()] = generation;
}

void HttpGenerations::Remove(const HttpGeneration* generation) {
  std::shared_ptr<HttpGeneration> last;  // released after the lock
  absl::MutexLock lock(&mutex_);
  auto it = open_.find(generation);
  if (it == open_.end()) return;
  last = std::move(it->second);
  open_.erase(it);
}

void HttpGenerations::Destroyed() {
  absl::MutexLock lock(&mutex_);
  --alive_;
}

HttpGeneration::HttpGeneration(std::shared_ptr<HttpGenerations> shared, Engine* engine,
                               GenerationApi api, std::shared_ptr<HttpExchange> exchange,
                               HttpRequest request)
    : shared_(std::move(shared)),
      engine_(engine),
      api_(api),
      exchange_(std::move(exchange)),
      request_(std::move(request)) {
  absl::MutexLock lock(&shared_->mutex_);
  ++shared_->alive_;
}

HttpGeneration::~HttpGeneration() { shared_->Destroyed(); }

void HttpGeneration::Start(std::shared_ptr<HttpGenerations> shared, Engine* engine,
                           GenerationApi api, std::shared_ptr<HttpExchange> exchange,
                           HttpRequest request) {
  auto generation = std::make_shared<HttpGeneration>(shared, engine, api, std::move(exchange),
                                                     std::move(request));
  shared->Add(generation);
  if (!shared->pool().TryPost([generation] { generation->Prepare(); })) {
    generation->EndWith(generation->Error(absl::UnavailableError(
        "the server has too many requests waiting to be read; retry in a second")));
  }
}

void HttpGeneration::Prepare() {
  if (shared_->stopping()) return EndWith(Error(absl::UnavailableError(StoppingMessage())));
  const ServedModel model = shared_->Model(*engine_);
  absl::StatusOr<ParsedGeneration> parsed =
      ParseGeneration(api_, request_.body, model, shared_->responses());
  request_.body = std::string();
  if (!parsed.ok()) return EndWith(Error(parsed.status()));
  parsed_ = *std::move(parsed);
  if (parsed_->request.prompt_logprobs < 0) return Submit();
  // The prompt's log-probabilities come first, from a Score request of their own.
  absl::StatusOr<std::shared_ptr<RequestHandle>> scored =
      engine_->SubmitScore(parsed_->request.params.prompt, parsed_->request.params.adapter,
                           parsed_->request.params.adapter_generation);
  if (!scored.ok()) return Refuse(scored.status());
  handle_ = *std::move(scored);
  phase_ = Phase::kScoring;
  WatchClient();
  Subscribe(&HttpGeneration::OnScoreNews);
}

void HttpGeneration::OnScoreNews() {
  if (phase_ != Phase::kScoring) return;
  for (StreamUpdate& update : handle_->Take()) {
    if (!update.done) continue;
    if (!update.status.ok()) return Refuse(update.status);
    score_logits_ = std::move(update.logits);
    phase_ = Phase::kPreparing;
    shared_->pool().Post([self = shared_from_this()] {
      const OpenAiRequest& request = self->parsed_->request;
      self->prompt_logprobs_ =
          PromptLogprobs(self->score_logits_, request.params.prompt,
                         self->engine_->options().vocab_size, request.prompt_logprobs);
      self->score_logits_ = {};
      self->Submit();
    });
    return;
  }
}

void HttpGeneration::Submit() {
  if (shared_->stopping()) return EndWith(Error(absl::UnavailableError(StoppingMessage())));
  absl::StatusOr<std::shared_ptr<RequestHandle>> handle = engine_->SubmitGenerate(
      parsed_->request.params, [exchange = exchange_] { return exchange->client_gone(); });
  if (!handle.ok()) return Refuse(handle.status());
  handle_ = *std::move(handle);
  request_id_ = handle_->request_id();
  phase_ = Phase::kGenerating;
  exchange_->Post([self = shared_from_this()] { self->Begin(); });
}

void HttpGeneration::Refuse(absl::Status status) {
  // The request's own fields are checked already: what the engine refuses is the prompt (too
  // long for the context or the KV pool) unless it names another field (max_tokens, when prompt
  // and completion together pass the context).
  if (status.code() == absl::StatusCode::kInvalidArgument && !HasParam(status)) {
    status = WithParam(std::move(status), parsed_->request.prompt_field());
  }
  EndWith(Error(status));
}

void HttpGeneration::Begin() {
  if (phase_ != Phase::kGenerating) return;
  if (shared_->stopping()) return OnCut();
  const OpenAiRequest& parsed = parsed_->request;
  if (!parsed.ignored_fields.empty()) {
    LogInfo(kLog, "request %d: fields no API defines, which change nothing: %s", request_id_,
            absl::StrJoin(parsed.ignored_fields, ", "));
  }
  const int32_t n = handle_->num_samples();
  writer_ = MakeReplyWriter(api_, *parsed_,
                            WriterContext{request_id_, shared_->options().model_name, absl::Now(),
                                          shared_->options().tokenizer, n,
                                          std::move(prompt_logprobs_), &shared_->responses()});
  streams_.assign(n, ReplyStream(parsed.reasoning, parsed.tool_syntax, parsed.include_reasoning));
  WatchClient();
  if (!parsed.stream) {
    choices_.resize(n);
    return Subscribe(&HttpGeneration::OnNews);
  }
  HttpReply head{200,
                 "text/event-stream",
                 {{"Cache-Control", "no-cache"}, {kRequestIdHeader, std::to_string(request_id_)}},
                 ""};
  head.request_id = request_id_;
  exchange_->StartStream(head);
  if (std::string events = writer_->Open(); !events.empty()) Write(std::move(events));
  Subscribe(&HttpGeneration::OnNews);
}

void HttpGeneration::Subscribe(void (HttpGeneration::*on_news)()) {
  handle_->SetNotifier([weak = weak_from_this(), on_news] {
    std::shared_ptr<HttpGeneration> self = weak.lock();
    if (self == nullptr) return;
    HttpExchange& exchange = *self->exchange_;
    exchange.Post([self = std::move(self), on_news] { ((*self).*on_news)(); });
  });
}

void HttpGeneration::OnNews() {
  if (phase_ != Phase::kGenerating) return;
  const bool stream = parsed_->request.stream;
  if (std::string pause = handle_->TakePause(); stream && !pause.empty()) {
    Write(KeepAliveComment(pause));
  }
  for (StreamUpdate& update : handle_->Take()) {
    if (update.done && !update.status.ok()) return FailWith(update.status);
    SampleNews news = Split(update);
    if (update.done) AddUsage(update, &usage_);
    if (!stream) {
      Collect(news);
    } else if (std::string events = writer_->Add(news); !events.empty()) {
      Write(std::move(events), update.made);
    }
  }
  if (handle_->finished()) Complete();
}

SampleNews HttpGeneration::Split(StreamUpdate& update) {
  SampleNews news;
  news.index = update.index;
  news.delta = streams_[update.index].Next(update.text, update.done);
  if (update.done) news.finish = update.finish_reason.value_or(FinishReason::kStop);
  news.stop_string = std::move(update.stop_string);
  news.logprobs = std::move(update.logprobs);
  return news;
}

void HttpGeneration::Collect(SampleNews& news) {
  ChoiceOutput& choice = choices_[news.index];
  choice.reasoning += news.delta.reasoning;
  choice.text += news.delta.content;
  for (ParsedToolCall& call : news.delta.calls) choice.tool_calls.push_back(std::move(call));
  for (TokenLogprob& t : news.logprobs) choice.logprobs.push_back(std::move(t));
  if (news.finish.has_value()) choice.finish_reason = *news.finish;
  if (!news.stop_string.empty()) choice.stop_string = std::move(news.stop_string);
}

void HttpGeneration::Complete() {
  if (parsed_->request.stream) {
    Write(writer_->Close(usage_));
    return EndWith(std::nullopt);
  }
  EndWith(writer_->Whole(choices_, usage_));
}

void HttpGeneration::FailWith(const absl::Status& status) {
  if (!parsed_->request.stream) return EndWith(Error(status));
  LogWarning(kLog, "request %d: failed while streaming: %s", request_id_, status.ToString());
  Write(writer_->Fail(status));
  EndWith(std::nullopt);
}

void HttpGeneration::Write(std::string event, absl::Time made) {
  std::function<void()> written;
  if (Metrics* metrics = shared_->options().metrics;
      metrics != nullptr && made != absl::InfinitePast()) {
    written = [metrics, made] {
      metrics->ObserveTokenDelivery(absl::ToDoubleSeconds(absl::Now() - made));
    };
  }
  exchange_->WriteChunk(std::move(event), std::move(written));
}

void HttpGeneration::WatchClient() {
  exchange_->SetOnGone([weak = weak_from_this()] {
    if (std::shared_ptr<HttpGeneration> self = weak.lock()) self->OnGone();
  });
}

void HttpGeneration::OnGone() {
  if (phase_ == Phase::kEnded) return;
  const bool streaming = phase_ == Phase::kGenerating && parsed_->request.stream;
  HttpReply gone = Error(absl::CancelledError("the client went away"));
  gone.status = 499;  // nginx's "client closed"
  EndWith(streaming ? std::nullopt : std::optional<HttpReply>(std::move(gone)));
}

void HttpGeneration::Cut() {
  exchange_->Post([self = shared_from_this()] { self->OnCut(); });
}

void HttpGeneration::OnCut() {
  const Phase phase = phase_;
  // A generation being prepared sees stopping() when its pool task ends.
  if (phase == Phase::kEnded || phase == Phase::kPreparing) return;
  const absl::Status stopping = absl::UnavailableError(StoppingMessage());
  if (phase == Phase::kGenerating && parsed_->request.stream && writer_ != nullptr) {
    // Cut, but not silently: the client learns its answer is incomplete and why.
    LogWarning(kLog, "request %d: cut while streaming: %s", request_id_, StoppingMessage());
    Write(writer_->Fail(stopping));
    return EndWith(std::nullopt);
  }
  EndWith(Error(stopping));
}

void HttpGeneration::EndWith(std::optional<HttpReply> reply) {
  if (phase_.exchange(Phase::kEnded) == Phase::kEnded) return;
  if (handle_ != nullptr) {
    handle_->SetNotifier(nullptr);
    if (!handle_->finished()) handle_->Cancel();
  }
  // Counted as open until its last byte is out, so that Stop does not close the connection first.
  exchange_->SetOnEnd(
      [shared = shared_, self = shared_from_this()] { shared->Remove(self.get()); });
  if (reply.has_value()) {
    if (request_id_ != 0) {
      reply->headers.emplace_back(kRequestIdHeader, std::to_string(request_id_));
      reply->request_id = request_id_;
    }
    exchange_->Reply(*std::move(reply));
  } else {
    exchange_->EndStream();
  }
}

}  // namespace tpserve
