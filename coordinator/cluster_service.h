// ClusterService (worker.proto), served by the coordinator for its workers: registration, and
// the key-value store the workers' collective rendezvous (Gloo) runs on.
//
// Thread-safe: gRPC threads call the RPCs, the main thread waits for registrations.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve {

struct RegisteredWorker {
  int rank = 0;
  std::string address;  // host:port of its WorkerService
  std::string hostname;
  int pid = 0;
};

// The rendezvous store's bounds. Groups keep a few small values per rank (addresses, the
// shared-memory segment's name, votes, NCCL ids), so these leave room for many re-formed groups
// while no caller can make the coordinator hold more than kMaxStoreBytes.
inline constexpr size_t kMaxStoreKeyBytes = 512;
inline constexpr size_t kMaxStoreValueBytes = size_t{1} << 20;
inline constexpr size_t kMaxStoreKeys = 100000;
inline constexpr int64_t kMaxStoreBytes = int64_t{64} << 20;

class ClusterServiceImpl final : public v1::ClusterService::Service {
 public:
  // Whether a worker still serves at `address`. Register uses it to tell a restarted worker
  // (the old one is gone: replace it) from a second process claiming a live rank (refuse).
  using LivenessProbe = std::function<bool(const std::string& address)>;
  // A probe that calls WorkerService.Status with `timeout`.
  static LivenessProbe StatusProbe(absl::Duration timeout);

  // StoreGet's wait when the request gives no positive timeout_ms.
  static constexpr absl::Duration kDefaultStoreGetTimeout = absl::Seconds(60);

  ClusterServiceImpl(int world_size, LivenessProbe probe);

  // INVALID_ARGUMENT naming the rank when it is outside [0, world_size) or the address is empty;
  // ALREADY_EXISTS naming the rank and both addresses when another live worker holds the rank.
  // The same worker registering again (same address and pid) is accepted.
  // Forgets the rendezvous keys of group `group_id` (those under "<group_id>/"), when a group
  // incarnation has ended and its successor forms under a new id.
  void ClearGroup(const std::string& group_id);

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override;
  // Sets (or overwrites) a key and wakes its waiters.
  grpc::Status StoreSet(grpc::ServerContext* context, const v1::StoreSetRequest* request,
                        v1::StoreSetResponse* response) override;
  // Waits until the key exists: DEADLINE_EXCEEDED naming the key after timeout_ms (or the
  // call's own deadline, whichever is first); CANCELLED when the caller goes away.
  grpc::Status StoreGet(grpc::ServerContext* context, const v1::StoreGetRequest* request,
                        v1::StoreGetResponse* response) override;

  // Blocks until every rank has registered and returns them by rank. DEADLINE_EXCEEDED naming
  // the missing ranks at `deadline`; CANCELLED as soon as `stop` (if given) is notified.
  absl::StatusOr<std::vector<RegisteredWorker>> WaitForAllRanks(absl::Time deadline,
                                                                const absl::Notification* stop);

  // What Leave does once the caller is known to be the rank's registered worker: drain the group
  // for it, returning whether every request in flight finished. Unset (start-up): Leave answers
  // at once. Set before serving, cleared before what it uses goes away.
  using LeaveHandler = std::function<bool(int rank)>;
  void SetLeaveHandler(LeaveHandler handler);
  // FAILED_PRECONDITION unless rank, address and pid are those the rank registered with.
  grpc::Status Leave(grpc::ServerContext* context, const v1::LeaveRequest* request,
                     v1::LeaveResponse* response) override;

  // Ranks that have not registered, e.g. "1, 2".
  std::string MissingRanks() const;
  // The workers registered so far, by rank.
  std::vector<RegisteredWorker> Registered() const;

 private:
  std::string MissingRanksLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::vector<RegisteredWorker> RegisteredLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Constant after construction.
  const int world_size_;
  const LivenessProbe probe_;

  mutable absl::Mutex mutex_;
  std::map<int, RegisteredWorker> workers_ ABSL_GUARDED_BY(mutex_);  // by rank
  absl::flat_hash_map<std::string, std::string> store_ ABSL_GUARDED_BY(mutex_);
  int64_t store_bytes_ ABSL_GUARDED_BY(mutex_) = 0;  // keys and values
  LeaveHandler leave_handler_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace tpserve
