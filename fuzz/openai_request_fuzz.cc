// Fuzzes the OpenAI request parser with the bundled model's tokenizer and chat template. Any
// body must give a request or an error status; an accepted request must satisfy what the
// engine relies on without checking again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "coordinator/openai_request.h"
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
  const ServedModel model{"smollm2", bundled.config.context_length, bundled.tokenizer.get(),
                          bundled.chat_template.get(), SamplingParams(), RequestLimits()};
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  // The first byte picks the endpoint, so one corpus feeds both parsers.
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const absl::StatusOr<OpenAiRequest> request = chat
                                                    ? ParseChatRequest(body.substr(1), model)
                                                    : ParseCompletionRequest(body.substr(1), model);
  if (request.ok()) CheckAccepted(*request, model);
  return 0;
}
