// vLLM's /tokenize and /detokenize over the served model's tokenizer: pure functions of a request
// body, run on the front-end pool. Each refusal is a 400 naming the field.
//
//   POST /tokenize    {"prompt": text, "add_special_tokens": bool (default true)}, or a chat:
//                     {"messages", "tools", "add_generation_prompt", "continue_final_message",
//                     "chat_template_kwargs"} rendered and tokenized as /v1/chat/completions does
//                     -> {"count", "max_model_len", "tokens": [ids], "token_strs": [...] when
//                         "return_token_strs": true}
//   POST /detokenize  {"tokens": [ids]} -> {"prompt": text}
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"
#include "coordinator/http_message.h"
#include "coordinator/openai_request.h"
#include "model/tokenizer.h"

namespace tpserve {

// add_special_tokens: BOS first when the model asks for one (as a completion's prompt gets it).
HttpReply TokenizeReply(const ServedModel& model, absl::string_view body);
HttpReply DetokenizeReply(const Tokenizer& tokenizer, absl::string_view body);

}  // namespace tpserve
