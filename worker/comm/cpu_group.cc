#include "worker/comm/cpu_group.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tpserve {

absl::StatusOr<CpuTransport> ParseCpuTransport(absl::string_view name) {
  if (name == "auto") return CpuTransport::kAuto;
  if (name == "shm") return CpuTransport::kShm;
  if (name == "gloo") return CpuTransport::kGloo;
  return absl::InvalidArgumentError(
      absl::StrCat("CPU transport '", name, "' is none of auto, shm, gloo"));
}

absl::StatusOr<CpuGroup> CreateCpuGroup(int rank, int world_size,
                                        std::shared_ptr<gloo::rendezvous::Store> store,
                                        const CpuGroupOptions& options) {
  ShmOptions shm = options.shm;
  shm.decline = options.transport == CpuTransport::kGloo;
  absl::StatusOr<std::unique_ptr<ShmCommunicator>> shared =
      ShmCommunicator::Create(rank, world_size, store, shm);
  if (shared.ok()) {
    ShmCommunicator* shm = shared->get();
    return CpuGroup{*std::move(shared), shm, "shared memory"};
  }
  if (shared.status().code() != absl::StatusCode::kFailedPrecondition ||
      options.transport == CpuTransport::kShm) {
    return shared.status();
  }
  absl::StatusOr<std::unique_ptr<GlooCommunicator>> gloo =
      GlooCommunicator::Create(rank, world_size, std::move(store), options.gloo);
  if (!gloo.ok()) return gloo.status();
  return CpuGroup{*std::move(gloo), nullptr,
                  absl::StrCat("Gloo over TCP (", shared.status().message(), ")")};
}

}  // namespace tpserve
