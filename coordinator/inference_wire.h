// inference.proto's messages to and from what the engine takes and streams: GenerateRequest's
// sampling and constraint fields, and one sample's news as a GenerateResponse chunk.
#pragma once

#include "absl/status/statusor.h"
#include "coordinator/constraint_compiler.h"
#include "coordinator/reply_stream.h"
#include "coordinator/request_handle.h"
#include "kernels/sampling_params.h"
#include "nlohmann/json.hpp"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

// Unset fields take `defaults`; an unset seed a random one.
SamplingParams FromProto(const v1::Sampling& s, SamplingParams defaults);
OutputConstraint FromProto(const v1::OutputConstraint& c);
// A Generate chunk: the update's tokens, text and log-probabilities; finish and usage when done.
v1::GenerateResponse ToChunk(const StreamUpdate& update);
// A chat prompt's chunk: `delta` (the update's text split by the sample's ReplyStream) replaces
// the text; its calls are numbered from `*calls` (the sample's calls so far), which advances, and
// take Mistral's 9-character ids for a Mistral template (`mistral_ids`).
void SetChatReply(const ReplyDelta& delta, uint64_t request_id, int32_t* calls, bool mistral_ids,
                  v1::GenerateResponse* chunk);

// GenerateRequest.chat and .constraint as the body of a /v1/chat/completions request (only the
// prompt's fields), which ParseChatBody renders and checks: the constraint as the guided_* field
// of its kind.
absl::StatusOr<nlohmann::ordered_json> ChatBody(const v1::Chat& chat,
                                                const v1::OutputConstraint& constraint);

}  // namespace tpserve
