// How the ranks of a CPU group reach each other: through shared memory (ShmCommunicator) when
// every rank is on one host and can map one segment, through Gloo over TCP (GlooCommunicator)
// otherwise: ranks on several hosts, or pods of one Kubernetes node, which do not share /dev/shm.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/comm/communicator.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/shm_communicator.h"

namespace tpserve {

// tpserve-worker --cpu-comm.
enum class CpuTransport { kAuto, kShm, kGloo };

// "auto", "shm" or "gloo".
absl::StatusOr<CpuTransport> ParseCpuTransport(absl::string_view name);

struct CpuGroupOptions {
  CpuTransport transport = CpuTransport::kAuto;
  GlooOptions gloo;
  ShmOptions shm;  // `decline` follows `transport`
};

struct CpuGroup {
  std::unique_ptr<Communicator> comm;
  ShmCommunicator* shm = nullptr;  // `comm`, when the group shares memory
  std::string transport;           // for the log: "shared memory" or "Gloo over TCP (why)"
};

// Joins the group of `world_size` ranks as `rank`; every rank calls it with the same store. All
// ranks first agree, through the store, whether each of them can map a shared segment (a kGloo
// rank says no): then every rank uses shared memory, or every rank Gloo. A kShm rank fails with
// FAILED_PRECONDITION instead of falling back (the others then wait for it in Gloo's rendezvous
// until their connect timeout).
absl::StatusOr<CpuGroup> CreateCpuGroup(int rank, int world_size,
                                        std::shared_ptr<gloo::rendezvous::Store> store,
                                        const CpuGroupOptions& options);

}  // namespace tpserve
