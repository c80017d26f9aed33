#include "worker/group_factory.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "worker/comm/coordinator_store.h"
#include "worker/comm/single_rank_communicator.h"
#include "worker/cuda_backend.h"

namespace tpserve {
namespace {

// Rank 0 publishes the NCCL id as soon as it has its device; the others wait this long for it.
constexpr absl::Duration kNcclRendezvousTimeout = absl::Seconds(60);
// A link's receive waits for every earlier stage's whole forward pass, not for one collective's
// skew: a slow step is not a dead rank. The coordinator's step deadline bounds it (an abandoned
// step aborts the links), and a peer that dies fails it at once.
constexpr absl::Duration kLinkOperationTimeout = absl::Hours(1);

// One group of `world` ranks meeting under `group_id`, `rank` within it: `spec` says the device
// and transport; `label` names a stage's group or a link in the log; `operation_timeout`, when
// set, is how long a CPU collective may wait for a peer.
absl::StatusOr<FormedGroup> FormStageGroup(const GroupSpec& spec, int rank, int world,
                                           const std::string& group_id, const std::string& label,
                                           std::optional<absl::Duration> operation_timeout = {}) {
  const bool cuda = spec.cuda_device >= 0;
  FormedGroup formed;
  if (world == 1) {
    formed.comm = std::make_unique<SingleRankCommunicator>();
    if (cuda) {
      ASSIGN_OR_RETURN(formed.device_comm, SingleRankDeviceComm());
    }
    return formed;
  }
  if (group_id.empty() || spec.coordinator_address.empty()) {
    return absl::InvalidArgumentError(
        "Init: a world of more than one rank needs group_id and coordinator_address");
  }
  auto store = std::make_shared<CoordinatorStore>(spec.coordinator_address, group_id);
  if (cuda) {
    ASSIGN_OR_RETURN(NcclCommunicatorHandles nccl,
                     CreateNcclCommunicator(rank, world, spec.cuda_device, std::move(store),
                                            kNcclRendezvousTimeout));
    formed.device_comm = nccl.device;
    formed.comm = std::move(nccl.comm);
    return formed;
  }
  CpuGroupOptions cpu;
  cpu.transport = spec.cpu_transport;
  cpu.gloo.host = spec.host;
  if (operation_timeout.has_value()) {
    cpu.gloo.operation_timeout = cpu.shm.operation_timeout = *operation_timeout;
  }
  ASSIGN_OR_RETURN(CpuGroup group, CreateCpuGroup(rank, world, std::move(store), cpu));
  if (spec.relay_steps) formed.relay_shm = group.shm;
  LogInfo("worker", "rank %d: the CPU group%s of %d ranks all-reduces through %s%s", spec.rank,
          label, world, group.transport,
          formed.relay_shm == nullptr ? ""
          : rank == 0                 ? " and relays the steps to the others"
                                      : ", steps from rank 0");
  formed.comm = std::move(group.comm);
  return formed;
}

}  // namespace

absl::StatusOr<FormedGroup> FormGroup(const GroupSpec& spec) {
  if (spec.pipeline_stages < 1 || spec.world % spec.pipeline_stages != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Init: ", spec.pipeline_stages,
                                                   " pipeline stages do not divide a world of ",
                                                   spec.world, " ranks"));
  }
  if (spec.pipeline_stages == 1) {
    return FormStageGroup(spec, spec.rank, spec.world, spec.group_id, /*label=*/"");
  }
  const int tp_size = spec.world / spec.pipeline_stages;
  const int stage = spec.rank / tp_size, tp_rank = spec.rank % tp_size;
  // The coordinator sends every rank of a pipeline its steps: no rank relays them.
  GroupSpec unrelayed = spec;
  unrelayed.relay_steps = false;
  // Stage by stage, each rank joins the link from the stage before before the one to the stage
  // after, so the chain of rendezvous completes from the first stage on.
  ASSIGN_OR_RETURN(FormedGroup formed, FormStageGroup(unrelayed, tp_rank, tp_size,
                                                      absl::StrCat(spec.group_id, "/stage", stage),
                                                      absl::StrCat(" (stage ", stage, ")")));
  // On CUDA ranks a link is a two-rank NCCL group, which the model sends and receives on.
  auto link = [&](int boundary, int link_rank) -> absl::StatusOr<FormedGroup> {
    return FormStageGroup(
        unrelayed, link_rank, 2, absl::StrCat(spec.group_id, "/link", boundary, ".", tp_rank),
        absl::StrCat(" (link ", boundary, ".", tp_rank, ")"), kLinkOperationTimeout);
  };
  if (stage > 0) {
    ASSIGN_OR_RETURN(FormedGroup from_previous, link(stage - 1, /*receiver*/ 0));
    formed.from_previous = std::move(from_previous.comm);
    formed.device_from_previous = from_previous.device_comm;
  }
  if (stage + 1 < spec.pipeline_stages) {
    ASSIGN_OR_RETURN(FormedGroup to_next, link(stage, /*sender*/ 1));
    formed.to_next = std::move(to_next.comm);
    formed.device_to_next = to_next.device_comm;
  }
  LogInfo("worker", "rank %d: pipeline stage %d of %d, tensor-parallel rank %d of %d", spec.rank,
          stage, spec.pipeline_stages, tp_rank, tp_size);
  return formed;
}

}  // namespace tpserve
