#include "worker/cuda_backend.h"

#include "absl/strings/str_cat.h"
#if TPSERVE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda_check.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/single_rank_device_communicator.h"
#endif

namespace tpserve {

#if TPSERVE_WITH_CUDA

absl::StatusOr<CudaDeviceChoice> SelectCudaDevice(int requested, int rank) {
  int count = 0;
  // Any error here (no driver, a driver too old, no GPU) means "no device".
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", rank, " asked for CUDA, but this machine has no usable CUDA device: ",
                     error != cudaSuccess ? cudaGetErrorString(error) : "0 devices visible"));
  }
  const int ordinal = requested >= 0 ? requested : rank % count;
  if (ordinal >= count) {
    return absl::InvalidArgumentError(absl::StrCat("--local-rank ", requested,
                                                   ": CUDA device ", ordinal, " does not exist (",
                                                   count, " visible)"));
  }
  cudaDeviceProp properties;
  if (absl::Status s = CudaStatus(cudaGetDeviceProperties(&properties, ordinal),
                                  absl::StrCat("cudaGetDeviceProperties(", ordinal, ")"));
      !s.ok()) {
    return s;
  }
  return CudaDeviceChoice{ordinal, absl::StrCat("cuda:", ordinal, " (", properties.name, ")")};
}

absl::StatusOr<NcclCommunicatorHandles> CreateNcclCommunicator(
    int rank, int world_size, int device, std::shared_ptr<gloo::rendezvous::Store> store,
    absl::Duration timeout) {
  auto comm = NcclCommunicator::Create(rank, world_size, device, std::move(store), timeout);
  if (!comm.ok()) return comm.status();
  NcclCommunicatorHandles handles;
  handles.device = comm->get();
  handles.comm = *std::move(comm);
  return handles;
}

absl::StatusOr<DeviceCommunicator*> SingleRankDeviceComm() {
  static SingleRankDeviceCommunicator* const comm = new SingleRankDeviceCommunicator();
  return comm;
}

#else

namespace {
absl::Status NoCuda() {
  return absl::UnimplementedError(
      "this build has no CUDA backend (configure with -DTPSERVE_CUDA=ON on a machine with the "
      "CUDA toolkit)");
}
}  // namespace

absl::StatusOr<CudaDeviceChoice> SelectCudaDevice(int, int) { return NoCuda(); }

absl::StatusOr<NcclCommunicatorHandles> CreateNcclCommunicator(
    int, int, int, std::shared_ptr<gloo::rendezvous::Store>, absl::Duration) {
  return NoCuda();
}

absl::StatusOr<DeviceCommunicator*> SingleRankDeviceComm() { return NoCuda(); }

#endif

}  // namespace tpserve
