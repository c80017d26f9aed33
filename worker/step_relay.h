// Steps relayed through shared memory. When every rank of a CPU group maps one segment
// (ShmCommunicator) and the coordinator asks for it (InitRequest.relay_steps), the coordinator
// sends each Step to rank 0 alone; rank 0 hands the request on through the segment before it runs
// the step, and every other rank, waiting for it on its execution thread, runs it as if it had
// come over gRPC. A step then costs one gRPC call instead of one per rank, and no gRPC thread is
// on the other ranks' path (vLLM's workers take the scheduler's output from a shared-memory
// queue the same way). Failures travel as the collectives' do: a rank that fails or exits leaves
// the group, and rank 0's step fails naming it.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tpserve/v1/worker.pb.h"
#include "worker/comm/shm_communicator.h"

namespace tpserve {

class StepRelay {
 public:
  // `comm` must outlive the relay.
  explicit StepRelay(ShmCommunicator* comm) : comm_(comm) {}

  // Rank 0: `request` reaches the other ranks (within the communicator's operation timeout).
  absl::Status Send(const v1::StepRequest& request);
  // The other ranks: the next step rank 0 sends, waited for without a deadline; UNAVAILABLE once
  // rank 0 exits or leaves the group, or the communicator is aborted.
  absl::StatusOr<v1::StepRequest> Receive();

 private:
  ShmCommunicator* const comm_;
};

}  // namespace tpserve
