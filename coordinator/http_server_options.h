// What the HTTP front end serves and with what limits (HttpServer, HttpGeneration).
#pragma once

#include <cstdint>
#include <string>

#include "coordinator/bearer_keys.h"
#include "coordinator/front_end_pool.h"
#include "coordinator/http_message.h"
#include "coordinator/lora_manager.h"
#include "coordinator/metrics.h"
#include "coordinator/reasoning.h"
#include "kernels/sampling_params.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"

namespace tpserve {

struct HttpServerOptions {
  std::string model_name;  // what clients pass as "model" and /v1/models lists
  // Listed by /v1/models until the engine runs; after that the engine's is used.
  int64_t context_length = 0;
  // Not owned; must outlive the server. `chat_template` may be null (chat requests get 400).
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat_template = nullptr;
  SamplingParams default_sampling;  // what a request's absent sampling fields take
  Metrics* metrics = nullptr;
  // /v1/* need one of these keys (none: open); health and metrics stay open.
  const BearerKeys* api_keys = nullptr;
  HttpLimits limits;
  // Where requests are parsed and their answers assembled; must outlive the server.
  FrontEndPool* pool = nullptr;
  ReasoningParser reasoning = ReasoningParser::kNone;  // how chat replies split out the thinking
  // The LoRA adapters served now: listed by /v1/models, named by "model"; null: none. Must
  // outlive the server.
  const LoraManager* loras = nullptr;
};

}  // namespace tpserve
