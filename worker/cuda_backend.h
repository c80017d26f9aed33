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

class DeviceCommunicator;  // worker/comm/device_communicator.h, in CUDA builds only

struct CudaDeviceChoice {
  int ordinal = 0;
  std::string name;  // "cuda:0 (NVIDIA H200)"
};

// The device rank `rank` runs on: `requested` (the worker's --local-rank) when >= 0, else
// rank mod the number of visible devices. FAILED_PRECONDITION without a usable device,
// INVALID_ARGUMENT for an ordinal that does not exist.
absl::StatusOr<CudaDeviceChoice> SelectCudaDevice(int requested, int rank);

// One NcclCommunicator through both of its interfaces: `comm` owns it and serves the worker;
// `device` is its DeviceCommunicator side, for the CUDA model, valid while `comm` lives.
struct NcclCommunicatorHandles {
  std::unique_ptr<Communicator> comm;
  DeviceCommunicator* device = nullptr;
};

// NcclCommunicator::Create (see worker/comm/nccl_communicator.h).
absl::StatusOr<NcclCommunicatorHandles> CreateNcclCommunicator(
    int rank, int world_size, int device, std::shared_ptr<gloo::rendezvous::Store> store,
    absl::Duration timeout);

// The DeviceCommunicator of a CUDA world of one (SingleRankDeviceCommunicator). It holds no
// state, so one instance serves the whole process, and a CUDA model kept across a re-formed
// world of one keeps a valid pointer.
absl::StatusOr<DeviceCommunicator*> SingleRankDeviceComm();

}  // namespace tpserve
