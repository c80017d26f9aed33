#include "worker/group_factory.h"

#include <utility>

#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/comm/coordinator_store.h"
#include "worker/comm/single_rank_communicator.h"
#include "worker/cuda_backend.h"

namespace tpserve {
namespace {

// Rank 0 publishes the NCCL id as soon as it has its device; the others wait this long for it.
constexpr absl::Duration kNcclRendezvousTimeout = absl::Seconds(60);

}  // namespace

absl::StatusOr<FormedGroup> FormGroup(const GroupSpec& spec) {
  const bool cuda = spec.cuda_device >= 0;
  FormedGroup formed;
  if (spec.world == 1) {
    formed.comm = std::make_unique<SingleRankCommunicator>();
    if (cuda) {
      ASSIGN_OR_RETURN(formed.device_comm, SingleRankDeviceComm());
    }
    return formed;
  }
  if (spec.group_id.empty() || spec.coordinator_address.empty()) {
    return absl::InvalidArgumentError(
        "Init: a world of more than one rank needs group_id and coordinator_address");
  }
  auto store = std::make_shared<CoordinatorStore>(spec.coordinator_address, spec.group_id);
  if (cuda) {
    ASSIGN_OR_RETURN(NcclCommunicatorHandles nccl,
                     CreateNcclCommunicator(spec.rank, spec.world, spec.cuda_device,
                                            std::move(store), kNcclRendezvousTimeout));
    formed.device_comm = nccl.device;
    formed.comm = std::move(nccl.comm);
    return formed;
  }
  CpuGroupOptions cpu;
  cpu.transport = spec.cpu_transport;
  cpu.gloo.host = spec.host;
  ASSIGN_OR_RETURN(CpuGroup group, CreateCpuGroup(spec.rank, spec.world, std::move(store), cpu));
  if (spec.relay_steps) formed.relay_shm = group.shm;
  LogInfo("worker", "rank %d: the CPU group of %d ranks all-reduces through %s%s", spec.rank,
          spec.world, group.transport,
          formed.relay_shm == nullptr ? ""
          : spec.rank == 0            ? " and relays the steps to the others"
                                      : ", steps from rank 0");
  formed.comm = std::move(group.comm);
  return formed;
}

}  // namespace tpserve
