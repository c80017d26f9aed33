// A step's two conversions to and from the wire (STYLE.md: one batch type per layer): the
// ScheduledBatch every rank receives as a StepRequest, and rank 0's StepResponse as StepOutputs.
// The scheduler sees neither proto.
#pragma once

#include <cstdint>

#include "coordinator/scheduled_batch.h"
#include "coordinator/step_outputs.h"
#include "tpserve/v1/worker.pb.h"

namespace tpserve {

// Generate entries sample the next token when they complete; Score entries ask for the logits
// of every position they run.
v1::StepRequest ToStepRequest(const ScheduledBatch& batch, uint64_t step_id, int64_t deadline_ms);

// Takes `response`'s outputs, leaving it without them.
StepOutputs FromStepResponse(v1::StepResponse* response);

}  // namespace tpserve
