// NcclCommunicator: the CUDA Communicator and DeviceCommunicator, one NCCL communicator per rank
// and one GPU per rank. Built only when CUDA is on (TPSERVE_CUDA); include it only from
// CUDA-enabled sources.
//
// Bootstrap: rank 0 creates the ncclUniqueId and publishes it in a gloo::rendezvous::Store under
// "nccl_unique_id"; the other ranks wait for it there. In the server the store is the
// CoordinatorStore, which prefixes every key with the group id, so the id from rank 0 is relayed
// by the coordinator and a re-formed group never reads an old id. Then every rank calls
// ncclCommInitRank, which waits for all `world_size` ranks.
//
// POINTER CONTRACT: unlike the CPU communicators, AllReduceSum and GatherToRoot take DEVICE
// pointers (memory on this rank's `device`), not host pointers. The CUDA model uses the
// DeviceCommunicator side, which runs on its compute stream without waiting.
//
// NCCL itself is opened at the first Create (worker/comm/nccl_library.h): NOT_FOUND naming it when
// the machine has none.
//
// Errors are returned as absl::Status naming the rank, never aborts: FAILED_PRECONDITION when the
// machine has no usable CUDA device, INVALID_ARGUMENT for a bad rank or device id,
// DEADLINE_EXCEEDED when the unique id did not appear in the store in time, UNAVAILABLE for other
// store or NCCL transport failures. After a failed collective the communicator stays broken: every
// later call returns the first error again, and the destructor aborts the NCCL communicator
// instead of destroying it. Recover by forming a new group.
//
// The NCCL communicator is non-blocking (ncclConfig_t::blocking = 0), which is what lets Abort
// call ncclCommAbort from another thread while this rank's kernels wait for a peer that is gone:
// the kernels end, the stream drains, and every later call fails. An NCCL call that answers
// ncclInProgress is waited for (ncclCommGetAsyncError) before the next; `timeout` bounds the
// unique-id exchange and ncclCommInitRank together.
//
// Thread-safety: Abort from any thread; everything else from the worker's execution thread only,
// in the same order on every rank (see communicator.h). Each call makes `device` current on the
// calling thread.
#pragma once

#include <cuda_runtime_api.h>
#include <gloo/rendezvous/store.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "kernels/cuda/bf16.h"
#include "worker/comm/communicator.h"
#include "worker/comm/device_communicator.h"
#include "worker/comm/nccl_library.h"

namespace tpserve {

class NcclCommunicator : public Communicator, public DeviceCommunicator {
 public:
  // The store key rank 0 publishes the ncclUniqueId under (sizeof(ncclUniqueId) raw bytes).
  static constexpr const char* kUniqueIdKey = "nccl_unique_id";

  // Joins the group of `world_size` ranks as `rank` on CUDA device `device` (an ordinal on this
  // machine). Non-zero ranks wait up to `timeout` for rank 0's unique id in `store`. Blocks in
  // ncclCommInitRank until every rank has joined. The store's keys must be fresh for this group.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      int rank, int world_size, int device, std::shared_ptr<gloo::rendezvous::Store> store,
      absl::Duration timeout);

  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int device() const { return device_; }
  // The stream the collectives run on; owned by this communicator.
  cudaStream_t stream() const { return stream_; }

  // `data`: DEVICE pointer, [count] floats. Enqueued on stream(), then waits for it, so the
  // result is ready on return.
  absl::Status AllReduceSum(float* data, int64_t count) override;

  // `send`: DEVICE pointer, [counts[rank]] floats. `recv`: DEVICE pointer on rank 0,
  // [sum(counts)] floats; unused elsewhere. Enqueued on stream(), then waits for it.
  absl::Status GatherToRoot(const float* send, absl::Span<const int64_t> counts,
                            float* recv) override;

  // DeviceCommunicator (see worker/comm/device_communicator.h); errors found at enqueue also
  // break the communicator. The gather: rank 0 copies its own part (unless `recv` is `send`) and
  // receives every other rank's part at its offset (ncclRecv/ncclSend in one NCCL group).
  absl::Status EnqueueAllReduceSum(cuda::bf16* data, int64_t count, cudaStream_t stream) override;
  absl::Status EnqueueGatherToRoot(const float* send, absl::Span<const int64_t> counts, float* recv,
                                   cudaStream_t stream) override;
  // ncclSend / ncclRecv; INVALID_ARGUMENT for this rank itself or a rank outside the group.
  absl::Status EnqueueSend(const cuda::bf16* data, int64_t count, int peer,
                           cudaStream_t stream) override;
  absl::Status EnqueueRecv(cuda::bf16* data, int64_t count, int peer, cudaStream_t stream) override;

  // ncclCommAbort, at once: kernels waiting for a peer end, and every later call fails naming
  // `reason`.
  void Abort(absl::string_view reason) override;

 private:
  NcclCommunicator(const NcclLibrary& nccl, int rank, int world_size, int device,
                   cudaStream_t stream);

  // The all-reduce of both sides: `data` is [count] elements of `type` (ncclFloat, ncclBfloat16),
  // enqueued on `stream`.
  absl::Status EnqueueAllReduce(void* data, int64_t count, ncclDataType_t type,
                                cudaStream_t stream);

  // One ncclSend (`send`) or ncclRecv of [count] bf16 with `peer`, enqueued on `stream`.
  absl::Status EnqueuePointToPoint(bool send, void* data, int64_t count, int peer,
                                   cudaStream_t stream);

  // Records the first collective failure (the communicator is broken from then on).
  absl::Status Fail(absl::Status status);
  // Runs one NCCL call on comm_ under abort_mutex_ (Abort frees comm_), then waits out an
  // ncclInProgress answer; fails once Abort has run or when `deadline` passes.
  template <typename Call>
  absl::Status Issue(const std::string& context, Call&& call,
                     absl::Time deadline = absl::InfiniteFuture());

  // Constant after construction.
  const NcclLibrary& nccl_;
  const int rank_;
  const int world_size_;
  const int device_;
  const cudaStream_t stream_;  // Owned: destroyed in the destructor.
  absl::Mutex abort_mutex_;
  // Owned; set once by Create, aborted and released by Abort (then null).
  ncclComm_t comm_ ABSL_GUARDED_BY(abort_mutex_) = nullptr;
  std::string abort_reason_ ABSL_GUARDED_BY(abort_mutex_);  // non-empty once aborted

  absl::Status error_;  // The first collective failure; OK while healthy.
};

}  // namespace tpserve
