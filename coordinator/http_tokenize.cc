#include "coordinator/http_tokenize.h"

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "coordinator/http_replies.h"
#include "coordinator/openai_request.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;

absl::StatusOr<json> ParseBody(absl::string_view body, std::initializer_list<const char*> known) {
  json value = ParseBoundedJson<json>(std::string_view(body.data(), body.size()));
  if (value.is_discarded() || !value.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request body must be a JSON object nested at most ", kMaxJsonDepth, " deep"));
  }
  for (const auto& [key, unused] : value.items()) {
    if (std::find_if(known.begin(), known.end(), [&](const char* k) { return key == k; }) ==
        known.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown field '", key, "'"));
    }
  }
  return value;
}

absl::StatusOr<bool> Flag(const json& body, const char* name, bool otherwise) {
  if (!body.contains(name)) return otherwise;
  if (!body[name].is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' must be a boolean"));
  }
  return body[name].get<bool>();
}

}  // namespace

HttpReply TokenizeReply(const ServedModel& model, absl::string_view body) {
  const Tokenizer& tokenizer = *model.tokenizer;
  absl::StatusOr<json> request =
      ParseBody(body, {"model", "prompt", "messages", "tools", "add_generation_prompt",
                       "continue_final_message", "chat_template_kwargs", "add_special_tokens",
                       "return_token_strs"});
  if (!request.ok()) return ErrorReply(request.status());
  const bool chat = request->contains("messages");
  if (chat == request->contains("prompt")) {
    return ErrorReply(absl::InvalidArgumentError("send either 'prompt' or 'messages'"));
  }
  if (!chat && !(*request)["prompt"].is_string()) {
    return ErrorReply(absl::InvalidArgumentError("'prompt' must be a string"));
  }
  if (!chat) {
    for (const char* field :
         {"tools", "add_generation_prompt", "continue_final_message", "chat_template_kwargs"}) {
      if (request->contains(field)) {
        return ErrorReply(
            absl::InvalidArgumentError(absl::StrCat("'", field, "' applies to 'messages' only")));
      }
    }
  }
  // A chat prompt is the template's text, special tokens and all, as the chat endpoint runs it.
  absl::StatusOr<bool> special = Flag(*request, "add_special_tokens", !chat);
  absl::StatusOr<bool> strs = Flag(*request, "return_token_strs", false);
  if (!special.ok()) return ErrorReply(special.status());
  if (!strs.ok()) return ErrorReply(strs.status());
  if (chat && *special) {
    return ErrorReply(absl::InvalidArgumentError(
        "'add_special_tokens': a chat prompt gets what its template writes; it must be false"));
  }
  absl::StatusOr<std::vector<int32_t>> ids;
  if (chat) {
    nlohmann::ordered_json chat_body = nlohmann::ordered_json::object();
    for (const char* field : {"model", "messages", "tools", "add_generation_prompt",
                              "continue_final_message", "chat_template_kwargs"}) {
      if (request->contains(field)) chat_body[field] = (*request)[field];
    }
    absl::StatusOr<OpenAiRequest> parsed = ParseChatBody(chat_body, model);
    if (!parsed.ok()) return ErrorReply(parsed.status());
    ids = std::move(parsed->params.prompt);
  } else {
    const std::string& prompt = (*request)["prompt"].get_ref<const std::string&>();
    ids = *special ? tokenizer.EncodePrompt(prompt)
                   : tokenizer.Encode(prompt, /*parse_special=*/false);
    if (!ids.ok()) {
      return ErrorReply(
          absl::InvalidArgumentError(absl::StrCat("'prompt': ", ids.status().message())));
    }
  }
  json reply = {{"count", ids->size()}, {"max_model_len", model.context_length}, {"tokens", *ids}};
  if (*strs) {
    json texts = json::array();
    for (int32_t id : *ids) texts.push_back(tokenizer.TokenText(id));
    reply["token_strs"] = std::move(texts);
  }
  return JsonReply(200, reply);
}

HttpReply DetokenizeReply(const Tokenizer& tokenizer, absl::string_view body) {
  absl::StatusOr<json> request = ParseBody(body, {"model", "tokens"});
  if (!request.ok()) return ErrorReply(request.status());
  if (!request->contains("tokens") || !(*request)["tokens"].is_array()) {
    return ErrorReply(absl::InvalidArgumentError("'tokens' must be an array of token ids"));
  }
  std::vector<int32_t> ids;
  for (const json& id : (*request)["tokens"]) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= tokenizer.vocab_size()) {
      return ErrorReply(absl::InvalidArgumentError(absl::StrCat(
          "'tokens': ", id.dump(), " is not a token id in [0, ", tokenizer.vocab_size(), ")")));
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return JsonReply(200, {{"prompt", tokenizer.Decode(ids)}});
}

}  // namespace tpserve
