// inference.proto's messages to and from what the engine takes and streams: GenerateRequest's
// sampling and constraint fields, and one sample's news as a GenerateResponse chunk.
#pragma once

#include "coordinator/constraint_compiler.h"
#include "coordinator/request_handle.h"
#include "kernels/sampling_params.h"
#include "tpserve/v1/inference.pb.h"

namespace tpserve {

// Unset fields take `defaults`; an unset seed a random one.
SamplingParams FromProto(const v1::Sampling& s, SamplingParams defaults);
OutputConstraint FromProto(const v1::OutputConstraint& c);
// A Generate chunk: the update's tokens, text and log-probabilities; finish and usage when done.
v1::GenerateResponse ToChunk(const StreamUpdate& update);

}  // namespace tpserve
