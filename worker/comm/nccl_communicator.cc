#include "worker/comm/nccl_communicator.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/cuda_check.h"
#include "common/logging.h"
#include "worker/comm/nccl_library.h"

namespace tpserve {
namespace {

// How often a call that answered ncclInProgress is looked at again.
constexpr absl::Duration kProgressPoll = absl::Microseconds(20);
// How long a healthy communicator's ncclCommFinalize may take at destruction.
constexpr absl::Duration kFinalizeTimeout = absl::Seconds(10);

// The store throws (gloo::IoException and friends); a text with "timeout" / "timed out" is a key
// that did not appear in time, anything else a broken store.
absl::Status StoreError(int rank, absl::string_view op, const std::exception& e) {
  const std::string what = e.what();
  const std::string lower = absl::AsciiStrToLower(what);
  const bool timed_out =
      absl::StrContains(lower, "timeout") || absl::StrContains(lower, "timed out");
  const std::string message =
      absl::StrCat("NCCL rank ", rank, ": ", op, " '", NcclCommunicator::kUniqueIdKey,
                   "' in the rendezvous store failed: ", what);
  return timed_out ? absl::DeadlineExceededError(message) : absl::UnavailableError(message);
}

// Rank 0 creates the id and publishes it; the others wait for it.
absl::StatusOr<ncclUniqueId> ExchangeUniqueId(const NcclLibrary& nccl, int rank,
                                              gloo::rendezvous::Store& store,
                                              absl::Duration timeout) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    absl::Status status =
        NcclStatus(nccl, nccl.ncclGetUniqueId(&id), "NCCL rank 0: ncclGetUniqueId");
    if (!status.ok()) return status;
    const char* bytes = reinterpret_cast<const char*>(&id);
    try {
      store.set(NcclCommunicator::kUniqueIdKey, std::vector<char>(bytes, bytes + sizeof(id)));
    } catch (const std::exception& e) {
      return StoreError(rank, "publishing", e);
    }
    return id;
  }
  std::vector<char> bytes;
  try {
    store.wait({NcclCommunicator::kUniqueIdKey}, absl::ToChronoMilliseconds(timeout));
    bytes = store.get(NcclCommunicator::kUniqueIdKey);
  } catch (const std::exception& e) {
    return StoreError(rank,
                      absl::StrCat("waiting ", absl::FormatDuration(timeout), " for rank 0's"), e);
  }
  if (bytes.size() != sizeof(id)) {
    return absl::DataLossError(absl::StrCat("NCCL rank ", rank, ": '",
                                            NcclCommunicator::kUniqueIdKey, "' holds ",
                                            bytes.size(), " bytes, expected ", sizeof(id)));
  }
  std::memcpy(&id, bytes.data(), sizeof(id));
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    int rank, int world_size, int device, std::shared_ptr<gloo::rendezvous::Store> store,
    absl::Duration timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL: rank ", rank, " is not in a world of ", world_size));
  }
  if (store == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank, ": no rendezvous store"));
  }
  absl::StatusOr<const NcclLibrary*> library = LoadNccl();
  if (!library.ok()) {
    return absl::Status(library.status().code(),
                        absl::StrCat("NCCL rank ", rank, ": ", library.status().message()));
  }
  const NcclLibrary& nccl = **library;
  // Any error here (no driver, driver too old, no GPU) means "no device".
  int device_count = 0;
  const cudaError_t count_error = cudaGetDeviceCount(&device_count);
  if (count_error != cudaSuccess || device_count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "NCCL rank ", rank, ": no CUDA device: ",
        count_error != cudaSuccess ? cudaGetErrorString(count_error) : "0 devices visible"));
  }
  if (device < 0 || device >= device_count) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank, ": device ", device,
                                                   " does not exist (", device_count, " visible)"));
  }
  const absl::Time started = absl::Now();
  absl::Status status = CudaStatus(
      cudaSetDevice(device), absl::StrCat("NCCL rank ", rank, ": cudaSetDevice(", device, ")"));
  if (!status.ok()) return status;

  absl::StatusOr<ncclUniqueId> id = ExchangeUniqueId(nccl, rank, *store, timeout);
  if (!id.ok()) return id.status();

  cudaStream_t stream = nullptr;
  status = CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                      absl::StrCat("NCCL rank ", rank, ": cudaStreamCreate"));
  if (!status.ok()) return status;
  // From here the object owns the stream, and the comm once it exists.
  std::unique_ptr<NcclCommunicator> comm(
      new NcclCommunicator(nccl, rank, world_size, device, stream));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Abort's ncclCommAbort from another thread needs it
  ncclComm_t handle = nullptr;
  const ncclResult_t init = nccl.ncclCommInitRankConfig(&handle, world_size, *id, rank, &config);
  if (handle == nullptr) {
    return NcclStatus(nccl, init == ncclSuccess ? ncclInternalError : init,
                      absl::StrCat("NCCL rank ", rank, " of ", world_size, ": ncclCommInitRank"));
  }
  {
    absl::MutexLock lock(&comm->abort_mutex_);
    comm->comm_ = handle;
  }
  status = comm->Issue(
      absl::StrCat("NCCL rank ", rank, " of ", world_size, ": ncclCommInitRank"),
      [init](ncclComm_t) { return init; }, started + timeout);
  if (!status.ok()) return comm->Fail(std::move(status));  // the destructor aborts it
  return comm;
}

NcclCommunicator::NcclCommunicator(const NcclLibrary& nccl, int rank, int world_size, int device,
                                   cudaStream_t stream)
    : nccl_(nccl), rank_(rank), world_size_(world_size), device_(device), stream_(stream) {}

NcclCommunicator::~NcclCommunicator() {
  // Teardown failures (a sticky CUDA error after a device fault) are logged, not fatal: the
  // process may be tearing down because of exactly that error.
  cudaSetDevice(device_);
  if (error_.ok()) {
    // A healthy non-blocking communicator finishes its work before it is destroyed.
    const absl::Status finalized = Issue(absl::StrCat("NCCL rank ", rank_, ": ncclCommFinalize"),
                                         nccl_.ncclCommFinalize, absl::Now() + kFinalizeTimeout);
    if (!finalized.ok()) {
      LogWarning("nccl", "%s", finalized.message());
      error_ = finalized;
    }
  }
  {
    absl::MutexLock lock(&abort_mutex_);
    if (comm_ != nullptr) {
      const ncclResult_t result =
          error_.ok() ? nccl_.ncclCommDestroy(comm_) : nccl_.ncclCommAbort(comm_);
      if (result != ncclSuccess) {
        LogWarning("nccl", "rank %d: releasing the NCCL communicator failed: %s", rank_,
                   nccl_.ncclGetErrorString(result));
      }
      comm_ = nullptr;
    }
  }
  const cudaError_t error = cudaStreamDestroy(stream_);
  if (error != cudaSuccess) {
    LogWarning("nccl", "rank %d: cudaStreamDestroy failed: %s", rank_, cudaGetErrorString(error));
  }
}

void NcclCommunicator::Abort(absl::string_view reason) {
  absl::MutexLock lock(&abort_mutex_);
  if (comm_ == nullptr) return;
  abort_reason_ = reason.empty() ? "aborted" : std::string(reason);
  cudaSetDevice(device_);
  const ncclResult_t result = nccl_.ncclCommAbort(comm_);
  if (result != ncclSuccess) {
    LogWarning("nccl", "rank %d: ncclCommAbort failed: %s", rank_,
               nccl_.ncclGetErrorString(result));
  }
  comm_ = nullptr;
}

template <typename Call>
absl::Status NcclCommunicator::Issue(const std::string& context, Call&& call, absl::Time deadline) {
  ncclResult_t result;
  for (bool first = true;; first = false) {
    {
      absl::MutexLock lock(&abort_mutex_);
      if (comm_ == nullptr) {
        return absl::UnavailableError(absl::StrCat(context, ": abandoned: ", abort_reason_));
      }
      if (first) {
        result = call(comm_);
      } else if (nccl_.ncclCommGetAsyncError(comm_, &result) != ncclSuccess) {
        result = ncclInternalError;
      }
    }
    if (result != ncclInProgress) break;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(context, ": timed out in progress"));
    }
    absl::SleepFor(kProgressPoll);
  }
  return NcclStatus(nccl_, result, context);
}

absl::Status NcclCommunicator::Fail(absl::Status status) {
  if (error_.ok()) error_ = status;
  return status;
}

absl::Status NcclCommunicator::AllReduceSum(float* data, int64_t count) {
  absl::Status status = EnqueueAllReduce(data, count, ncclFloat, stream_);
  if (status.ok() && count > 0) {
    status = CudaStatus(cudaStreamSynchronize(stream_),
                        absl::StrCat("NCCL rank ", rank_, ": AllReduceSum"));
    if (!status.ok()) return Fail(std::move(status));
  }
  return status;
}

absl::Status NcclCommunicator::GatherToRoot(const float* send, absl::Span<const int64_t> counts,
                                            float* recv) {
  absl::Status status = EnqueueGatherToRoot(send, counts, recv, stream_);
  if (status.ok()) {
    status = CudaStatus(cudaStreamSynchronize(stream_),
                        absl::StrCat("NCCL rank ", rank_, ": GatherToRoot"));
    if (!status.ok()) return Fail(std::move(status));
  }
  return status;
}

absl::Status NcclCommunicator::EnqueueAllReduceSum(cuda::bf16* data, int64_t count,
                                                   cudaStream_t stream) {
  return EnqueueAllReduce(data, count, ncclBfloat16, stream);
}

absl::Status NcclCommunicator::EnqueueAllReduce(void* data, int64_t count, ncclDataType_t type,
                                                cudaStream_t stream) {
  if (!error_.ok()) return error_;
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL rank ", rank_, ": AllReduceSum of ", count, " elements"));
  }
  if (count == 0) return absl::OkStatus();
  const std::string context =
      absl::StrCat("NCCL rank ", rank_, ": AllReduceSum of ", count, " elements");
  absl::Status status = CudaStatus(cudaSetDevice(device_), context);
  if (status.ok()) {
    status = Issue(context, [&](ncclComm_t comm) {
      return nccl_.ncclAllReduce(data, data, static_cast<size_t>(count), type, ncclSum, comm,
                                 stream);
    });
  }
  return status.ok() ? status : Fail(std::move(status));
}

absl::Status NcclCommunicator::EnqueueGatherToRoot(const float* send,
                                                   absl::Span<const int64_t> counts, float* recv,
                                                   cudaStream_t stream) {
  if (!error_.ok()) return error_;
  if (static_cast<int>(counts.size()) != world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank_, ": GatherToRoot got ",
                                                   counts.size(), " counts for a world of ",
                                                   world_size_));
  }
  for (int64_t count : counts) {
    if (count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL rank ", rank_, ": GatherToRoot count ", count, " is negative"));
    }
  }
  const std::string context = absl::StrCat("NCCL rank ", rank_, ": GatherToRoot");
  absl::Status status = CudaStatus(cudaSetDevice(device_), context);
  if (!status.ok()) return Fail(std::move(status));

  if (rank_ == 0 && counts[0] > 0 && recv != send) {
    status = CudaStatus(cudaMemcpyAsync(recv, send, static_cast<size_t>(counts[0]) * sizeof(float),
                                        cudaMemcpyDeviceToDevice, stream),
                        context);
    if (!status.ok()) return Fail(std::move(status));
  }
  // One NCCL group under one Issue: Abort cannot free the communicator in the middle of it.
  status = Issue(context, [&](ncclComm_t comm) {
    ncclResult_t result = nccl_.ncclGroupStart();
    if (result != ncclSuccess) return result;
    if (rank_ == 0) {
      int64_t offset = counts[0];
      for (int r = 1; r < world_size_ && result == ncclSuccess; ++r) {
        if (counts[r] > 0) {
          result = nccl_.ncclRecv(recv + offset, static_cast<size_t>(counts[r]), ncclFloat, r, comm,
                                  stream);
        }
        offset += counts[r];
      }
    } else if (counts[rank_] > 0) {
      result = nccl_.ncclSend(send, static_cast<size_t>(counts[rank_]), ncclFloat, 0, comm, stream);
    }
    // The group must be closed even when a call inside it failed.
    const ncclResult_t end = nccl_.ncclGroupEnd();
    return result == ncclSuccess ? end : result;
  });
  return status.ok() ? status : Fail(std::move(status));
}

absl::Status NcclCommunicator::EnqueueSend(const cuda::bf16* data, int64_t count, int peer,
                                           cudaStream_t stream) {
  // ncclSend only reads the buffer; its signature is shared with ncclRecv's.
  return EnqueuePointToPoint(/*send=*/true, const_cast<cuda::bf16*>(data), count, peer, stream);
}

absl::Status NcclCommunicator::EnqueueRecv(cuda::bf16* data, int64_t count, int peer,
                                           cudaStream_t stream) {
  return EnqueuePointToPoint(/*send=*/false, data, count, peer, stream);
}

absl::Status NcclCommunicator::EnqueuePointToPoint(bool send, void* data, int64_t count, int peer,
                                                   cudaStream_t stream) {
  if (!error_.ok()) return error_;
  const std::string context =
      absl::StrCat("NCCL rank ", rank_, send ? ": Send of " : ": Recv of ", count, " elements ",
                   send ? "to" : "from", " rank ", peer);
  if (peer < 0 || peer >= world_size_ || peer == rank_ || count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": no such peer or count"));
  }
  if (count == 0) return absl::OkStatus();
  absl::Status status = CudaStatus(cudaSetDevice(device_), context);
  if (status.ok()) {
    status = Issue(context, [&](ncclComm_t comm) {
      const size_t n = static_cast<size_t>(count);
      return send ? nccl_.ncclSend(data, n, ncclBfloat16, peer, comm, stream)
                  : nccl_.ncclRecv(data, n, ncclBfloat16, peer, comm, stream);
    });
  }
  return status.ok() ? status : Fail(std::move(status));
}

}  // namespace tpserve
