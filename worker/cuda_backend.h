// The CUDA pieces the worker server needs, behind a header without CUDA types, so that the RPC
// side builds the same with and without CUDA. In a build without CUDA every call returns
// UNIMPLEMENTED saying so.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "worker/comm/communicator.h"

namespace tpserve {

struct CudaDeviceChoice {
  int ordinal = 0;
  std::string name;  // "cuda:0 (NVIDIA H200)"
};

// The device rank `rank` runs on: `requested` (the worker's --local-rank) when >= 0, else
// rank mod the number of visible devices. FAILED_PRECONDITION without a usable device,
// INVALID_ARGUMENT for an ordinal that does not exist.
absl::StatusOr<CudaDeviceChoice> SelectCudaDevice(int requested, int rank);

// NcclCommunicator::Create, returned as a Communicator (see worker/comm/nccl_communicator.h).
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    int rank, int world_size, int device, std::shared_ptr<gloo::rendezvous::Store> store,
    absl::Duration timeout);

}  // namespace tpserve
