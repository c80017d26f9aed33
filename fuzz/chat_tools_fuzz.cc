// Fuzzes chat requests with tool calls through the request parser and the bundled model's chat
// template, and model replies through the tool-call parsers. The input's fields (split at 0x1F)
// fill a well-formed body, so that the fuzzer spends its time inside the messages rather than on
// JSON syntax: a user turn, an assistant turn calling a tool (its name and `arguments` text), the
// tool's result, the offered tool's name and `parameters` schema text, and a reply text. Checked:
// the parser accepts or refuses with INVALID_ARGUMENT; an accepted request's prompt ids lie in the
// vocabulary and, with tools to call, its constraint is a structural tag whose JSON parses within
// the depth bound; a reply split at any point and streamed through ToolCallStream releases what
// ParseToolCalls finds in it whole, in both call syntaxes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/json_depth.h"
#include "coordinator/openai_request.h"
#include "coordinator/tool_call_parser.h"
#include "fuzz/bundled_model.h"
#include "fuzz/require.h"
#include "nlohmann/json.hpp"

namespace tpserve {
namespace {

using nlohmann::json;

std::string Field(const std::vector<std::string>& fields, size_t i) {
  return i < fields.size() ? fields[i] : std::string();
}

void CheckReply(ToolCallSyntax syntax, const std::string& reply, size_t split) {
  const ToolCallDelta whole = ParseToolCalls(syntax, reply);
  ToolCallStream stream(syntax);
  const size_t cut = reply.empty() ? 0 : split % (reply.size() + 1);
  ToolCallDelta streamed = stream.Add(std::string_view(reply).substr(0, cut));
  for (ToolCallDelta part : {stream.Add(std::string_view(reply).substr(cut)), stream.Finish()}) {
    streamed.content += part.content;
    for (ParsedToolCall& call : part.calls) streamed.calls.push_back(std::move(call));
  }
  Require(streamed.content == whole.content, "streamed content adds up to the whole parse");
  Require(streamed.calls.size() == whole.calls.size(), "streamed calls are the whole parse's");
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    Require(streamed.calls[i].name == whole.calls[i].name &&
                streamed.calls[i].arguments == whole.calls[i].arguments,
            "streamed calls are the whole parse's");
  }
}

}  // namespace
}  // namespace tpserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpserve;
  if (size == 0) return 0;
  const std::vector<std::string> fields =
      absl::StrSplit(absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), '\x1f');
  const uint8_t flags = data[0];
  const BundledModel& bundled = GetBundledModel();
  const ServedModel model{"smollm2", bundled.config.context_length, bundled.tokenizer.get(),
                          bundled.chat_template.get(), SamplingParams(), RequestLimits()};

  json arguments = Field(fields, 3);
  if (flags & 1) {
    arguments = ParseBoundedJson<json>(Field(fields, 3));
    if (arguments.is_discarded()) arguments = Field(fields, 3);
  }
  json body = {
      {"messages",
       {{{"role", "user"}, {"content", Field(fields, 0)}},
        {{"role", "assistant"},
         {"content", Field(fields, 1)},
         {"tool_calls",
          {{{"id", "c1"},
            {"type", "function"},
            {"function", {{"name", Field(fields, 2)}, {"arguments", arguments}}}}}}},
        {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", Field(fields, 4)}}}},
      {"max_tokens", 4}};
  if (flags & 2) {
    json parameters = ParseBoundedJson<json>(Field(fields, 6));
    json function = {{"name", Field(fields, 5)}};
    if (!parameters.is_discarded()) function["parameters"] = parameters;
    body["tools"] = {{{"type", "function"}, {"function", function}}};
    if (flags & 4) body["tool_choice"] = "required";
  }
  const absl::StatusOr<OpenAiRequest> request = ParseChatRequest(
      body.dump(-1, ' ', false, json::error_handler_t::replace), model);
  if (!request.ok()) {
    Require(request.status().code() == absl::StatusCode::kInvalidArgument,
            "a refused chat request is INVALID_ARGUMENT");
  } else {
    for (int32_t id : request->params.prompt) {
      Require(id >= 0 && id < model.tokenizer->vocab_size(), "prompt ids inside the vocabulary");
    }
    const OutputConstraint& constraint = request->params.constraint;
    if (constraint.kind == OutputConstraint::Kind::kStructuralTag) {
      Require(!ParseBoundedJson<json>(constraint.spec, 2 * kMaxJsonDepth).is_discarded(),
              "a tool constraint is JSON within the depth bound");
    }
  }
  const std::string reply = Field(fields, 7);
  CheckReply(ToolCallSyntax::kHermes, reply, flags);
  CheckReply(ToolCallSyntax::kLlama3Json, reply, flags >> 3);
  return 0;
}
