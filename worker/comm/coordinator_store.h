// CoordinatorStore: the gloo::rendezvous::Store that CPU ranks rendezvous through, kept by the
// coordinator's ClusterService (StoreSet / StoreGet). Every key is stored as "<group_id>/<key>",
// so a re-formed group (a new group_id) never reads the keys of an earlier incarnation.
//
// Failures throw, as Gloo's own stores do: gloo::IoException whose text says "timed out" when a
// key did not appear in time (GlooCommunicator reports DEADLINE_EXCEEDED for it), and another
// gloo::IoException naming the coordinator and the RPC error for everything else. While waiting,
// an unreachable coordinator is retried until the wait's deadline.
//
// Thread-safety: the methods may be called from any thread (the gRPC stub is thread-safe).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve {

class CoordinatorStore : public gloo::rendezvous::Store {
 public:
  // `coordinator_address`: host:port of ClusterService. `group_id`: the key prefix (non-empty).
  CoordinatorStore(const std::string& coordinator_address, const std::string& group_id);

  void set(const std::string& key, const std::vector<char>& data) override;
  // Waits up to Store::kDefaultTimeout for `key`, then returns its value.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  // A timeout of 0 waits without limit (Gloo's kNoTimeout).
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  // Fetches `key` (unprefixed), retrying until `timeout` passes; throws as described above.
  std::vector<char> Fetch(const std::string& key, std::chrono::milliseconds timeout);

  const std::string address_;
  const std::string prefix_;  // "<group_id>/"
  const std::unique_ptr<v1::ClusterService::Stub> stub_;
};

}  // namespace tpserve
