#include "coordinator/openai_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/status_macros.h"
#include "coordinator/openai_chat_fields.h"
#include "coordinator/openai_constraint.h"
#include "coordinator/openai_error.h"
#include "coordinator/openai_fields.h"
#include "coordinator/schema_keywords.h"
#include "coordinator/tool_calls.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::ordered_json;
// One parse of the body, its key order kept: templates print tools and tool calls as JSON, and a
// schema's property order is the order its output follows.
using json = nlohmann::ordered_json;

constexpr int64_t kDefaultCompletionMaxTokens = 16;  // OpenAI's default for /v1/completions

// The float sampling parameters OpenAI (or vLLM) names, each read into its SamplingParams field;
// absent ones keep the served model's defaults, and SamplingParams::Validate judges the ranges.
struct FloatField {
  const char* name;
  float SamplingParams::*field;
};
constexpr FloatField kFloatFields[] = {
    {"temperature", &SamplingParams::temperature},
    {"top_p", &SamplingParams::top_p},
    {"min_p", &SamplingParams::min_p},
    {"repetition_penalty", &SamplingParams::repetition_penalty},
    {"presence_penalty", &SamplingParams::presence_penalty},
    {"frequency_penalty", &SamplingParams::frequency_penalty},
};

absl::Status GetSampling(const json& body, SamplingParams* s) {
  for (const FloatField& field : kFloatFields) {
    const json* value = Find(body, field.name);
    if (value == nullptr) continue;
    if (!value->is_number()) return WrongType(field.name, "a number", *value);
    s->*field.field = static_cast<float>(value->get<double>());
  }
  ASSIGN_OR_RETURN(const std::optional<int64_t> top_k, GetInt(body, "top_k"));
  if (top_k.has_value()) {
    if (*top_k < std::numeric_limits<int32_t>::min() ||
        *top_k > std::numeric_limits<int32_t>::max()) {
      return InvalidField("top_k", absl::StrCat(*top_k, " is out of range"));
    }
    s->top_k = *top_k == -1 ? 0 : static_cast<int32_t>(*top_k);  // vLLM's -1 and our 0: off
  }
  if (const json* seed = Find(body, "seed")) {
    if (seed->is_number_unsigned()) {
      s->seed = seed->get<uint64_t>();
    } else {
      ASSIGN_OR_RETURN(const int64_t value, AsInt(*seed, "seed"));
      s->seed = static_cast<uint64_t>(value);
    }
  } else {
    s->seed = RandomSamplingSeed();
  }
  if (auto error = s->FirstInvalidField()) return WithParam(s->Validate(), error->field);
  return absl::OkStatus();
}

// The value of `name`, or null when it is absent or JSON null: OpenAI clients send null for
// "not given".

// The base model, or the LoRA adapter "model" names: its slot.
absl::StatusOr<LoraModule> CheckModel(const json& body, const ServedModel& model) {
  const json* name = Find(body, "model");
  if (name == nullptr) return LoraModule();
  if (!name->is_string()) return WrongType("model", "a string", *name);
  std::optional<LoraModule> named =
      LoraNamed(model.loras, model.name, name->get_ref<const std::string&>());
  if (!named.has_value()) return ModelNotFound(name->get_ref<const std::string&>());
  return *std::move(named);
}

absl::StatusOr<std::vector<std::string>> GetStop(const json& body, const RequestLimits& limits) {
  const json* stop = Find(body, "stop");
  std::vector<std::string> result;
  if (stop == nullptr) return result;
  if (stop->is_string()) {
    if (stop->get_ref<const std::string&>().empty()) {
      return InvalidField("stop", "must not be empty");
    }
    result.push_back(stop->get<std::string>());
  } else if (!stop->is_array()) {
    return WrongType("stop", "a string or an array of strings", *stop);
  } else {
    for (size_t i = 0; i < stop->size(); ++i) {
      const json& s = (*stop)[i];
      if (!s.is_string()) return WrongType(absl::StrCat("stop[", i, "]"), "a string", s);
      result.push_back(s.get<std::string>());
    }
  }
  RETURN_IF_ERROR(CheckStopStrings(result, limits));
  return result;
}

// `bad_words` as the token sequences to ban: each word as the tokenizer writes it at the start of
// a text and, where that differs, after a space (vLLM's reading).
absl::StatusOr<std::vector<std::vector<int32_t>>> GetBadWords(const json& body,
                                                              const ServedModel& model) {
  std::vector<std::vector<int32_t>> result;
  const json* words = Find(body, "bad_words");
  if (words == nullptr) return result;
  if (!words->is_array()) return WrongType("bad_words", "an array of strings", *words);
  if (words->size() > static_cast<size_t>(model.limits.max_bad_words)) {
    return InvalidField("bad_words",
                        absl::StrCat("holds ", words->size(), " words; at most ",
                                     model.limits.max_bad_words, " are allowed (--max-bad-words)"));
  }
  for (size_t i = 0; i < words->size(); ++i) {
    const std::string param = absl::StrCat("bad_words[", i, "]");
    const json& word = (*words)[i];
    if (!word.is_string()) return WrongType(param, "a string", word);
    const std::string text(absl::StripLeadingAsciiWhitespace(word.get_ref<const std::string&>()));
    if (text.empty()) return InvalidField(param, "must not be empty");
    if (text.size() > static_cast<size_t>(model.limits.max_stop_string_bytes)) {
      return InvalidField(param, absl::StrCat("is ", text.size(), " bytes; at most ",
                                              model.limits.max_stop_string_bytes,
                                              " are allowed (--max-stop-string-bytes)"));
    }
    for (const std::string& spelling : {text, " " + text}) {
      absl::StatusOr<std::vector<int32_t>> ids =
          model.tokenizer->Encode(spelling, /*parse_special=*/false);
      if (!ids.ok()) return InvalidField(param, ids.status().message());
      if (!ids->empty() && std::find(result.begin(), result.end(), *ids) == result.end()) {
        result.push_back(*std::move(ids));
      }
    }
  }
  return result;
}

// OpenAI's logit_bias, {"<token id>": bias}, at most limits.max_logit_bias entries.
absl::StatusOr<std::vector<std::pair<int32_t, float>>> GetLogitBias(const json& body,
                                                                    const ServedModel& model) {
  std::vector<std::pair<int32_t, float>> result;
  const json* bias = Find(body, "logit_bias");
  if (bias == nullptr) return result;
  if (!bias->is_object()) return WrongType("logit_bias", "an object of token ids", *bias);
  if (bias->size() > static_cast<size_t>(model.limits.max_logit_bias)) {
    return InvalidField(
        "logit_bias", absl::StrCat("holds ", bias->size(), " entries; at most ",
                                   model.limits.max_logit_bias, " are allowed (--max-logit-bias)"));
  }
  // The engine checks each token against the vocabulary and each bias against [-100, 100].
  for (const auto& [key, value] : bias->items()) {
    int32_t token;
    if (!absl::SimpleAtoi(key, &token)) {
      return InvalidField("logit_bias",
                          absl::StrCat("\"", key.substr(0, 32), "\" is not a token id"));
    }
    if (!value.is_number()) {
      return WrongType("logit_bias", "an object of numbers", value);
    }
    result.emplace_back(token, value.get<float>());
  }
  return result;
}

// Token ids from a JSON array, each checked against the vocabulary.
absl::StatusOr<std::vector<int32_t>> GetTokenIds(const json& ids, absl::string_view param,
                                                 const Tokenizer& tokenizer) {
  if (!ids.is_array()) return WrongType(param, "an array of token ids", ids);
  std::vector<int32_t> result;
  result.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string element = absl::StrCat(param, "[", i, "]");
    ASSIGN_OR_RETURN(const int64_t id, AsInt(ids[i], element));
    if (id < 0 || id >= tokenizer.vocab_size()) {
      return InvalidField(element, absl::StrCat("token ", id, " is outside the vocabulary [0, ",
                                                tokenizer.vocab_size(), ")"));
    }
    result.push_back(static_cast<int32_t>(id));
  }
  return result;
}

// EncodeBoundedPrompt, with an error that names the request field.
absl::StatusOr<std::vector<int32_t>> EncodePrompt(const std::string& text, absl::string_view param,
                                                  const ServedModel& model) {
  absl::StatusOr<std::vector<int32_t>> ids =
      EncodeBoundedPrompt(text, model.context_length, *model.tokenizer);
  if (!ids.ok()) return InvalidField(param, ids.status().message());
  return ids;
}

absl::StatusOr<std::vector<int32_t>> GetCompletionPrompt(const json& body,
                                                         const ServedModel& model) {
  const json* prompt = Find(body, "prompt");
  if (prompt == nullptr) return InvalidField("prompt", "is required");
  const json* one = prompt;
  std::string param = "prompt";
  // [[ids]] or ["text"]: a batch, of which one prompt is supported.
  if (prompt->is_array() && !prompt->empty() && !prompt->front().is_number()) {
    if (prompt->size() != 1) {
      return InvalidField("prompt", absl::StrCat("holds ", prompt->size(),
                                                 " prompts; send one prompt per request"));
    }
    one = &prompt->front();
    param = "prompt[0]";
  }
  if (one->is_string()) {
    return EncodePrompt(one->get_ref<const std::string&>(), param, model);
  }
  if (!one->is_array()) return WrongType(param, "a string or an array of token ids", *one);
  if (one->empty()) return InvalidField(param, "must not be empty");
  return GetTokenIds(*one, param, *model.tokenizer);
}

// The fields both endpoints share. `request->params.prompt` is set by the caller.
absl::Status ParseCommon(const json& body, const ServedModel& model, OpenAiRequest* request) {
  GenerateParams& params = request->params;
  ASSIGN_OR_RETURN(const LoraModule adapter, CheckModel(body, model));
  params.adapter = adapter.slot;
  params.adapter_generation = adapter.generation;

  ASSIGN_OR_RETURN(std::optional<bool> stream, GetBool(body, "stream"));
  request->stream = stream.value_or(false);
  if (const json* options = Find(body, "stream_options")) {
    if (!request->stream) {
      return InvalidField("stream_options", "is only allowed when stream is true");
    }
    if (!options->is_object()) return WrongType("stream_options", "an object", *options);
    for (const auto& [key, value] : options->items()) {
      if (key != "include_usage" && !value.is_null() && value != false) {
        return InvalidField(absl::StrCat("stream_options.", key),
                            "is not supported by this server");
      }
    }
    const json* include_usage = Find(*options, "include_usage");
    if (include_usage != nullptr && !include_usage->is_boolean()) {
      return WrongType("stream_options.include_usage", "a boolean", *include_usage);
    }
    request->include_usage = include_usage != nullptr && include_usage->get<bool>();
  }

  params.sampling = model.default_sampling;
  RETURN_IF_ERROR(GetSampling(body, &params.sampling));

  ASSIGN_OR_RETURN(const std::optional<int64_t> n, GetInt(body, "n"));
  RETURN_IF_ERROR(CheckSampleCount(n.value_or(1), model.limits));
  params.n = static_cast<int32_t>(n.value_or(1));
  ASSIGN_OR_RETURN(params.stop, GetStop(body, model.limits));
  if (const json* ids = Find(body, "stop_token_ids")) {
    if (ids->is_array() && ids->size() > static_cast<size_t>(model.limits.max_stop_token_ids)) {
      return InvalidField("stop_token_ids", absl::StrCat("holds ", ids->size(), " ids; at most ",
                                                         model.limits.max_stop_token_ids,
                                                         " are allowed (--max-stop-token-ids)"));
    }
    ASSIGN_OR_RETURN(params.stop_token_ids, GetTokenIds(*ids, "stop_token_ids", *model.tokenizer));
  }
  ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, GetBool(body, "ignore_eos"));
  params.ignore_eos = ignore_eos.value_or(false);
  ASSIGN_OR_RETURN(std::optional<bool> include_stop, GetBool(body, "include_stop_str_in_output"));
  params.include_stop_str_in_output = include_stop.value_or(false);
  ASSIGN_OR_RETURN(std::optional<bool> skip_special, GetBool(body, "skip_special_tokens"));
  params.skip_special_tokens = skip_special.value_or(true);
  ASSIGN_OR_RETURN(const int64_t min_tokens,
                   GetIntIn(body, "min_tokens", 0, 0, model.context_length));
  params.min_tokens = static_cast<int32_t>(min_tokens);
  if (const json* ids = Find(body, "allowed_token_ids")) {
    if (ids->is_array() && ids->size() > static_cast<size_t>(model.tokenizer->vocab_size())) {
      return InvalidField("allowed_token_ids", "holds more ids than the vocabulary has tokens");
    }
    ASSIGN_OR_RETURN(params.allowed_token_ids,
                     GetTokenIds(*ids, "allowed_token_ids", *model.tokenizer));
    if (params.allowed_token_ids.empty()) {
      return InvalidField("allowed_token_ids", "must not be empty");
    }
  }
  ASSIGN_OR_RETURN(params.bad_words_ids, GetBadWords(body, model));
  ASSIGN_OR_RETURN(params.logit_bias, GetLogitBias(body, model));
  ASSIGN_OR_RETURN(std::optional<bool> speculate, GetBool(body, "speculative_decoding"));
  params.speculate = speculate.value_or(true);
  ASSIGN_OR_RETURN(params.constraint, GetConstraint(body));
  return absl::OkStatus();
}

// Completions' echo and vLLM's prompt_logprobs (what they need of the prompt is computed from the
// Score path's logits: PromptLogprobs).
absl::Status GetEcho(const json& body, const ServedModel& model, OpenAiRequest* request) {
  ASSIGN_OR_RETURN(const std::optional<bool> echo, GetBool(body, "echo"));
  request->echo = echo.value_or(false);
  if (request->echo) {
    const json& prompt = *Find(body, "prompt");
    const json& one = prompt.is_array() && !prompt.empty() && !prompt.front().is_number()
                          ? prompt.front()
                          : prompt;
    request->echo_text =
        one.is_string() ? one.get<std::string>() : model.tokenizer->Decode(request->params.prompt);
  }
  ASSIGN_OR_RETURN(const std::optional<int64_t> prompt_logprobs, GetInt(body, "prompt_logprobs"));
  if (prompt_logprobs.has_value()) {
    RETURN_IF_ERROR(CheckLogprobs(*prompt_logprobs, "prompt_logprobs"));
    if (request->stream) return InvalidField("prompt_logprobs", "is not allowed with stream");
    request->prompt_logprobs = static_cast<int32_t>(*prompt_logprobs);
    request->return_prompt_logprobs = true;
  } else if (request->echo && request->params.logprobs >= 0) {
    request->prompt_logprobs = request->params.logprobs;
  }
  return absl::OkStatus();
}

// A reasoning model's thinking: where it starts, whether the reply shows it, and its budget, which
// (like a constraint) the grammar enforces behind the thinking.
absl::Status GetReasoning(const json& body, const ServedModel& model, std::string_view prompt,
                          OpenAiRequest* request) {
  ASSIGN_OR_RETURN(const std::optional<bool> include, GetBool(body, "include_reasoning"));
  request->include_reasoning = include.value_or(true);
  ASSIGN_OR_RETURN(const std::optional<int64_t> budget, GetInt(body, "thinking_token_budget"));
  if (budget.has_value()) {
    if (model.reasoning == ReasoningParser::kNone) {
      return InvalidField("thinking_token_budget",
                          "this model is served without a reasoning parser (--reasoning-parser)");
    }
    if (*budget < 0 || *budget > model.context_length) {
      return InvalidField("thinking_token_budget",
                          absl::StrCat("must be in [0, ", model.context_length, "]"));
    }
  }
  request->reasoning = ReasoningStartOf(model.reasoning, prompt);
  OutputConstraint& constraint = request->params.constraint;
  if (request->reasoning == ReasoningStart::kNone ||
      (!constraint.active() && !budget.has_value())) {
    return absl::OkStatus();
  }
  constraint.thinking = OutputConstraint::Thinking{
      request->reasoning == ReasoningStart::kTagged ? std::string(kThinkBegin) : std::string(),
      static_cast<int32_t>(budget.value_or(-1))};
  if (constraint.param.empty()) constraint.param = "thinking_token_budget";
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<json> ParseJsonBody(absl::string_view body) {
  if (JsonNestingDepth(StdView(body)) > kMaxJsonDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body nests JSON deeper than ", kMaxJsonDepth, " levels"));
  }
  json value;
  try {
    value = json::parse(body);
  } catch (const json::exception& e) {
    // Also what nlohmann reports for strings that are not UTF-8.
    return absl::InvalidArgumentError(
        absl::StrCat("the request body is not valid JSON: ", e.what()));
  }
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body must be a JSON object, not ", value.type_name()));
  }
  return value;
}

absl::StatusOr<OpenAiRequest> ParseCompletionRequest(absl::string_view body,
                                                     const ServedModel& model) {
  ASSIGN_OR_RETURN(const json request_body, ParseJsonBody(body));
  OpenAiRequest request;
  request.endpoint = OpenAiEndpoint::kCompletions;
  ASSIGN_OR_RETURN(request.ignored_fields, CheckKnownFields(request_body, request.endpoint));
  RETURN_IF_ERROR(ParseCommon(request_body, model, &request));
  ASSIGN_OR_RETURN(request.params.prompt, GetCompletionPrompt(request_body, model));
  ASSIGN_OR_RETURN(
      const int64_t max_tokens,
      GetIntIn(request_body, "max_tokens", kDefaultCompletionMaxTokens, 1, model.context_length));
  request.params.max_tokens = static_cast<int32_t>(max_tokens);
  ASSIGN_OR_RETURN(const std::optional<int64_t> logprobs, GetInt(request_body, "logprobs"));
  if (logprobs.has_value()) RETURN_IF_ERROR(CheckLogprobs(*logprobs, "logprobs"));
  request.params.logprobs = static_cast<int32_t>(logprobs.value_or(-1));
  RETURN_IF_ERROR(GetEcho(request_body, model, &request));
  // best_of = n returns every sample, which is what n alone does.
  if (const json* best_of = Find(request_body, "best_of")) {
    if (*best_of != request.params.n) return InvalidField("best_of", "must equal n if set");
  }
  return request;
}

absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view body, const ServedModel& model) {
  ASSIGN_OR_RETURN(const json request_body, ParseJsonBody(body));
  return ParseChatBody(request_body, model);
}

absl::StatusOr<OpenAiRequest> ParseChatBody(const json& request_body, const ServedModel& model) {
  OpenAiRequest request;
  request.endpoint = OpenAiEndpoint::kChatCompletions;
  ASSIGN_OR_RETURN(request.ignored_fields, CheckKnownFields(request_body, request.endpoint));
  RETURN_IF_ERROR(ParseCommon(request_body, model, &request));
  ASSIGN_OR_RETURN(ordered_json messages, GetMessages(request_body));
  ASSIGN_OR_RETURN(const RequestTools request_tools, GetTools(request_body, model.limits));
  if (model.chat_template == nullptr) {
    return InvalidField("messages",
                        "this model has no chat template that tpserve supports; "
                        "use /v1/completions");
  }
  ordered_json tools = request_tools.as_sent;
  const bool may_call = request_tools.choice.mode != ToolChoiceMode::kNone;
  const ToolCallFormat& format = model.tool_format;
  if (!format.template_renders_tools) {
    messages = FallbackToolTurns(std::move(messages));
    if (may_call) messages = WithSystemText(std::move(messages), FallbackToolPrompt(tools));
    tools = nullptr;
  }
  if (may_call) {
    if (request.params.constraint.active()) {
      return InvalidField(request.params.constraint.param, "cannot be combined with tools");
    }
    request.params.constraint =
        ToolCallConstraint(format.syntax, request_tools.functions, request_tools.choice);
    request.tool_syntax = format.syntax;
  }
  ordered_json template_variables;
  if (const json* kwargs = Find(request_body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) return WrongType("chat_template_kwargs", "an object", *kwargs);
    template_variables = *kwargs;
  }
  ASSIGN_OR_RETURN(const std::optional<bool> add_generation_prompt,
                   GetBool(request_body, "add_generation_prompt"));
  ASSIGN_OR_RETURN(const std::optional<bool> continue_final,
                   GetBool(request_body, "continue_final_message"));
  if (continue_final.value_or(false) && add_generation_prompt.value_or(false)) {
    return InvalidField("continue_final_message",
                        "cannot be combined with add_generation_prompt: true");
  }
  absl::StatusOr<std::string> text = model.chat_template->Apply(
      messages, tools,
      /*add_generation_prompt=*/add_generation_prompt.value_or(!continue_final.value_or(false)),
      template_variables);
  if (!text.ok()) return InvalidField("messages", text.status().message());
  if (continue_final.value_or(false)) RETURN_IF_ERROR(OpenFinalMessage(messages, &*text));
  ASSIGN_OR_RETURN(request.params.prompt, EncodePrompt(*text, "messages", model));
  RETURN_IF_ERROR(GetReasoning(request_body, model, *text, &request));
  // max_completion_tokens replaced max_tokens; 0 (unset) generates up to the context length.
  const char* max_field = Find(request_body, "max_completion_tokens") != nullptr
                              ? "max_completion_tokens"
                              : "max_tokens";
  ASSIGN_OR_RETURN(const int64_t max_tokens,
                   GetIntIn(request_body, max_field, 0, 1, model.context_length));
  request.params.max_tokens = static_cast<int32_t>(max_tokens);
  ASSIGN_OR_RETURN(std::optional<bool> logprobs, GetBool(request_body, "logprobs"));
  ASSIGN_OR_RETURN(std::optional<int64_t> top_logprobs, GetInt(request_body, "top_logprobs"));
  if (top_logprobs.has_value()) {
    if (!logprobs.value_or(false)) {
      return InvalidField("top_logprobs", "requires logprobs to be true");
    }
    RETURN_IF_ERROR(CheckLogprobs(*top_logprobs, "top_logprobs"));
  }
  request.params.logprobs =
      logprobs.value_or(false) ? static_cast<int32_t>(top_logprobs.value_or(0)) : -1;
  return request;
}

}  // namespace tpserve
