// The collective group a worker's Init forms: a world of one needs none; otherwise NCCL for CUDA
// ranks, and for CPU ranks shared memory or Gloo (CreateCpuGroup), every rank meeting the others
// through the coordinator's rendezvous store. With pipeline parallelism the world is stages ×
// tensor-parallel ranks, rank = stage × T + tensor-parallel rank: each stage forms its own
// group of T ranks, and each rank a link of two ranks to the same tensor-parallel rank of the
// stage before and after it (worker/comm/pipeline_links.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/cpu_group.h"
#include "worker/comm/device_communicator.h"
#include "worker/comm/shm_communicator.h"

namespace tpserve {

struct GroupSpec {
  int rank = 0;  // in the whole world, of every stage
  int world = 1;
  int pipeline_stages = 1;
  int cuda_device = -1;             // the CUDA ordinal; -1: a CPU group
  std::string group_id;             // the rendezvous keys' prefix (worlds of more than one)
  std::string coordinator_address;  // where the rendezvous store is
  bool relay_steps = false;         // CPU ranks sharing memory: rank 0 relays the steps
  CpuTransport cpu_transport = CpuTransport::kAuto;
  std::string host;                 // the address Gloo binds and advertises
};

struct FormedGroup {
  std::unique_ptr<Communicator> comm;  // this rank's stage's tensor-parallel group
  std::unique_ptr<Communicator>
      from_previous;                          // the link from the previous stage; null on the first
  std::unique_ptr<Communicator> to_next;      // the link to the next stage; null on the last
  DeviceCommunicator* device_comm = nullptr;  // a CUDA group's, for the CUDA model
  // A CUDA group's links, device side (the objects from_previous and to_next own).
  DeviceCommunicator* device_from_previous = nullptr;
  DeviceCommunicator* device_to_next = nullptr;
  ShmCommunicator* relay_shm = nullptr;       // `comm`, when it relays the steps
};

// INVALID_ARGUMENT for a world of several ranks without group_id or coordinator_address, or a
// world the stages do not divide; the transport's error when the group does not form. Logs which
// transport a CPU group took.
absl::StatusOr<FormedGroup> FormGroup(const GroupSpec& spec);

}  // namespace tpserve
