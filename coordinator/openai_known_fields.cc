#include "coordinator/openai_known_fields.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "coordinator/openai_error.h"

namespace tpserve {
namespace {

using json = nlohmann::ordered_json;

enum Endpoints { kCompletions = 1, kChat = 2, kBoth = 3 };

// A field this server honours (is_default null), or one it refuses unless the value is
// is_default's. JSON null counts as absent and is never judged.
struct KnownField {
  std::string_view name;
  int endpoints;
  bool (*is_default)(const json&);
};

bool False(const json& v) { return v == false; }
bool True(const json& v) { return v == true; }
bool Empty(const json& v) { return (v.is_string() || v.is_array() || v.is_object()) && v.empty(); }
bool Zero(const json& v) { return v.is_number() && v == 0; }
bool One(const json& v) { return v.is_number() && v == 1; }
bool Never(const json&) { return false; }

constexpr KnownField kFields[] = {
    // OpenAI's fields.
    {"model", kBoth, nullptr},
    {"prompt", kCompletions, nullptr},
    {"messages", kChat, nullptr},
    {"echo", kCompletions, nullptr},
    {"echo", kChat, False},
    {"frequency_penalty", kBoth, nullptr},
    {"presence_penalty", kBoth, nullptr},
    {"logit_bias", kBoth, nullptr},
    {"logprobs", kBoth, nullptr},
    {"top_logprobs", kChat, nullptr},
    {"max_tokens", kBoth, nullptr},
    {"max_completion_tokens", kChat, nullptr},
    {"n", kBoth, nullptr},
    {"best_of", kCompletions, nullptr},
    {"seed", kBoth, nullptr},
    {"stop", kBoth, nullptr},
    {"stream", kBoth, nullptr},
    {"stream_options", kBoth, nullptr},
    {"suffix", kCompletions, Empty},
    {"temperature", kBoth, nullptr},
    {"top_p", kBoth, nullptr},
    {"user", kBoth, nullptr},
    {"response_format", kBoth, nullptr},
    {"tools", kChat, nullptr},
    {"tool_choice", kChat, nullptr},
    {"parallel_tool_calls", kChat, nullptr},
    {"functions", kChat, Empty},
    {"function_call", kChat, Never},
    {"reasoning_effort", kChat, Never},
    {"metadata", kChat, Empty},
    {"store", kChat, False},
    {"service_tier", kChat, Never},
    {"modalities", kChat, Never},
    {"audio", kChat, Never},
    {"prediction", kChat, Never},
    {"web_search_options", kChat, Never},
    // vLLM's extensions (and tpserve's own).
    {"top_k", kBoth, nullptr},
    {"min_p", kBoth, nullptr},
    {"repetition_penalty", kBoth, nullptr},
    {"stop_token_ids", kBoth, nullptr},
    {"include_stop_str_in_output", kBoth, nullptr},
    {"ignore_eos", kBoth, nullptr},
    {"min_tokens", kBoth, nullptr},
    {"skip_special_tokens", kBoth, nullptr},
    {"allowed_token_ids", kBoth, nullptr},
    {"bad_words", kBoth, nullptr},
    {"prompt_logprobs", kCompletions, nullptr},
    {"prompt_logprobs", kChat, Never},
    {"add_special_tokens", kCompletions, True},
    {"add_special_tokens", kChat, False},
    {"add_generation_prompt", kChat, nullptr},
    {"continue_final_message", kChat, nullptr},
    {"chat_template_kwargs", kChat, nullptr},
    {"chat_template", kChat, Empty},
    {"documents", kChat, Empty},
    {"structured_outputs", kBoth, nullptr},
    {"guided_json", kBoth, nullptr},
    {"guided_regex", kBoth, nullptr},
    {"guided_choice", kBoth, nullptr},
    {"guided_grammar", kBoth, nullptr},
    {"guided_json_object", kBoth, nullptr},
    {"guided_decoding_backend", kBoth, Never},
    {"guided_whitespace_pattern", kBoth, Never},
    {"speculative_decoding", kBoth, nullptr},
    {"include_reasoning", kChat, nullptr},
    {"use_beam_search", kBoth, False},
    {"length_penalty", kBoth, One},
    {"watermarking", kBoth, False},
    {"spaces_between_special_tokens", kBoth, False},
    {"truncate_prompt_tokens", kBoth, Never},
    {"truncation_side", kBoth, Never},
    {"logprob_token_ids", kBoth, Empty},
    {"prompt_embeds", kCompletions, Empty},
    {"priority", kBoth, Zero},
    {"request_id", kBoth, Never},
    {"session_id", kBoth, Never},
    {"return_tokens_as_token_ids", kBoth, False},
    {"return_token_ids", kBoth, False},
    {"return_weight_versions", kBoth, False},
    {"return_prompt_text", kChat, False},
    {"routed_experts_prompt_start", kBoth, Zero},
    {"return_token_offsets", kBoth, False},
    {"mm_payload", kBoth, Never},
    {"return_mm_kwargs", kBoth, False},
    {"media_io_kwargs", kChat, Empty},
    {"mm_processor_kwargs", kChat, Empty},
    {"cache_salt", kBoth, Empty},
    {"kv_transfer_params", kBoth, Empty},
    {"ec_transfer_params", kBoth, Empty},
    {"vllm_xargs", kBoth, Empty},
    {"repetition_detection", kBoth, Empty},
    {"thinking_token_budget", kCompletions, Never},
    {"thinking_token_budget", kChat, nullptr},
    {"stream_interval", kBoth, One},
};

}  // namespace

absl::StatusOr<std::vector<std::string>> CheckKnownFields(const json& body,
                                                          OpenAiEndpoint endpoint) {
  const int mine = endpoint == OpenAiEndpoint::kCompletions ? kCompletions : kChat;
  std::vector<std::string> unknown;
  for (const auto& [key, value] : body.items()) {
    const KnownField* field = nullptr;
    for (const KnownField& f : kFields) {
      if (f.name == key && (f.endpoints & mine) != 0) field = &f;
    }
    if (field == nullptr) {
      unknown.push_back(key);
    } else if (field->is_default != nullptr && !value.is_null() && !field->is_default(value)) {
      return InvalidField(key, "is not supported by this server");
    }
  }
  return unknown;
}

}  // namespace tpserve
