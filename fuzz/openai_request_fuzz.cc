// Fuzzes the request parsers (OpenAI's completions and chat, and the Messages and Responses APIs
// through their translation into a chat request) with the bundled model's tokenizer and chat
// template, served with and without a reasoning parser. Any body must give a request or an error
// status; an accepted request must satisfy what the engine relies on without checking again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "coordinator/messages_request.h"
#include "coordinator/openai_request.h"
#include "coordinator/responses_request.h"
#include "fuzz/bundled_model.h"
#include "fuzz/require.h"

namespace tpserve {
namespace {

void CheckAccepted(const OpenAiRequest& request, const ServedModel& model) {
  const GenerateParams& params = request.params;
  const int32_t vocab = model.tokenizer->vocab_size();
  for (int32_t id : params.prompt) {
    Require(id >= 0 && id < vocab, "prompt token ids inside the vocabulary");
  }
  for (int32_t id : params.stop_token_ids) {
    Require(id >= 0 && id < vocab, "stop token ids inside the vocabulary");
  }
  Require(!params.sampling.FirstInvalidField().has_value(), "sampling parameters valid");
  Require(params.n >= 1 && params.n <= model.limits.max_n, "n in [1, --max-n]");
  Require(params.stop.size() <= static_cast<size_t>(model.limits.max_stop_strings),
          "at most --max-stop-strings stop strings");
  for (int32_t id : params.allowed_token_ids) {
    Require(id >= 0 && id < vocab, "allowed token ids inside the vocabulary");
  }
  for (const auto& [id, bias] : params.logit_bias) {
    Require(id >= 0 && id < vocab && bias >= -100 && bias <= 100, "logit biases in range");
  }
  Require(params.logprobs >= -1 && params.logprobs <= kMaxLogprobs, "logprobs in [-1, max]");
  Require(params.max_tokens >= 0 && params.max_tokens <= model.context_length,
          "max_tokens within the context length");
  for (const std::string& stop : params.stop) Require(!stop.empty(), "stop strings not empty");
}

}  // namespace
}  // namespace tpserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpserve;
  const BundledModel& bundled = GetBundledModel();
  if (size == 0) return 0;
  // The first byte picks the API (its low two bits) and whether the model reasons (bit 2), so
  // one corpus feeds every parser.
  const ServedModel model{
      "smollm2",
      bundled.config.context_length,
      bundled.tokenizer.get(),
      bundled.chat_template.get(),
      SamplingParams(),
      RequestLimits(),
      ToolCallFormat(),
      (data[0] & 4) != 0 ? ReasoningParser::kDeepSeekR1 : ReasoningParser::kNone};
  const absl::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<OpenAiRequest> request = absl::InvalidArgumentError("");
  switch (data[0] & 3) {
    case 0:
      request = ParseCompletionRequest(body, model);
      break;
    case 1:
      request = ParseChatRequest(body, model);
      break;
    case 2: {
      absl::StatusOr<nlohmann::ordered_json> object = ParseJsonBody(body);
      if (!object.ok()) return 0;
      absl::StatusOr<nlohmann::ordered_json> chat = MessagesToChatBody(*object);
      if (!chat.ok()) return 0;
      request = ParseChatBody(*chat, model);
      break;
    }
    case 3: {
      static ResponseStore* store = new ResponseStore(16, 1 << 20);
      absl::StatusOr<nlohmann::ordered_json> object = ParseJsonBody(body);
      if (!object.ok()) return 0;
      absl::StatusOr<ResponsesRequest> translated = ResponsesToChatBody(*object, *store);
      if (!translated.ok()) return 0;
      request = ParseChatBody(translated->chat, model);
      break;
    }
  }
  if (request.ok()) CheckAccepted(*request, model);
  return 0;
}
