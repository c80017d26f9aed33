// GlooCommunicator: the CPU Communicator, over Gloo's TCP transport. Ranks find each other through
// a gloo::rendezvous::Store (a FileStore in tests, a coordinator-backed store in the server), then
// hold one TCP connection per peer (full mesh) until destruction.
//
// Gloo reports failures by throwing; this class catches every exception at its boundary and
// returns absl::Status: DEADLINE_EXCEEDED when a peer did not join or answer in time, UNAVAILABLE
// for any other transport failure. After a failed collective this rank closes its connections,
// so that peers waiting for it fail at once instead of at their operation timeout (as they do
// when a rank dies), and the communicator stays broken: every later call returns the first error
// again. Recover by forming a new group (a new communicator on a fresh store or key prefix).
//
// Thread-safety: Abort from any thread; everything else from the worker's execution thread only,
// in the same order on every rank (see communicator.h).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/comm/communicator.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}  // namespace rendezvous
namespace transport {
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace tpserve {

struct GlooOptions {
  // Address (IP or host name) this rank binds and advertises to its peers. Ignored when
  // `interface` is set.
  std::string host = "127.0.0.1";
  // Network interface to bind (e.g. "eth0"), using its address; empty: use `host`.
  std::string interface;
  // Deadline for the whole rendezvous: every rank must have joined the store by then.
  absl::Duration connect_timeout = absl::Seconds(30);
  // Deadline for one collective, from its start on this rank.
  absl::Duration operation_timeout = absl::Seconds(30);
};

class GlooCommunicator : public Communicator {
 public:
  // Joins the group of `world_size` ranks as `rank` and connects to every peer. Blocks until all
  // ranks have joined or `options.connect_timeout` passes. Sets SIGPIPE to ignored if it is at
  // its default, so that a vanished peer is an error rather than the death of this process. The
  // store's keys must be fresh for this group: when re-forming a group on the same store, wrap it
  // in a gloo::rendezvous::PrefixStore with a new generation prefix.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      int rank, int world_size, std::shared_ptr<gloo::rendezvous::Store> store,
      const GlooOptions& options);

  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  // Reduce-scatter then all-gather over point-to-point messages; every element is summed in rank
  // order, so the result is the same bits on every rank and for every count.
  absl::Status AllReduceSum(float* data, int64_t count) override;

  // Point-to-point sends to rank 0, received straight into `recv` at each rank's offset (Gloo's
  // later `gatherv`, which the 2022 snapshot lacks). Ranks with a count of 0 send nothing.
  absl::Status GatherToRoot(const float* send, absl::Span<const int64_t> counts,
                            float* recv) override;

  // Interrupts the waits of the collective in flight (Gloo's abortWaitRecv / abortWaitSend), or
  // fails the next one before it waits; that collective then closes the connections.
  void Abort(absl::string_view reason) override;

 private:
  GlooCommunicator(int rank, int world_size, std::shared_ptr<gloo::Context> context,
                   absl::Duration operation_timeout);

  // Runs `fn`, turning a Gloo exception into a Status that names `op` and this rank (and the
  // reason given to Abort, if that was the cause); on failure marks the communicator broken and
  // closes the connections.
  template <typename Fn>
  absl::Status Guarded(const char* op, Fn&& fn);
  // While it lives, Abort interrupts the waits on `buffers`: declare it after them, so that it
  // ends first. Throws when Abort came first.
  class Watching {
   public:
    Watching(GlooCommunicator* comm, std::initializer_list<gloo::transport::UnboundBuffer*> buffers);
    ~Watching();
    Watching(const Watching&) = delete;
    Watching& operator=(const Watching&) = delete;

   private:
    GlooCommunicator* const comm_;
  };

  // Constant after construction.
  const int rank_;
  const int world_size_;
  const std::shared_ptr<gloo::Context> context_;  // Owns the device and the peer connections.
  const absl::Duration operation_timeout_;

  absl::Mutex abort_mutex_;
  absl::Status aborted_ ABSL_GUARDED_BY(abort_mutex_);  // set once by Abort
  // The buffers of the collective in flight.
  std::vector<gloo::transport::UnboundBuffer*> watched_ ABSL_GUARDED_BY(abort_mutex_);

  absl::Status error_;  // The first collective failure; OK while healthy.
  std::vector<float> staging_;  // AllReduceSum: every rank's copy of this rank's slice
};

}  // namespace tpserve
