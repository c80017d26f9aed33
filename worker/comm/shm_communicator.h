// ShmCommunicator: the CPU Communicator for a group whose ranks all run on one host. Every rank
// maps one POSIX shared-memory segment; a collective is plain loads and stores into it, ordered by
// one barrier counter per rank. Ranks on different hosts, or in containers that do not share
// /dev/shm, cannot map the segment: Create then reports FAILED_PRECONDITION on every rank alike, so
// that the whole group can fall back to GlooCommunicator together (cpu_group.h decides).
//
// Rendezvous, through the same gloo::rendezvous::Store as Gloo's (keys "shm_segment",
// "shm_vote_rank_<r>", which do not collide with Gloo's): rank 0 creates the segment under a
// random 128-bit name (O_EXCL, mode 0600), reserves its memory up front (a full /dev/shm is a
// failed Create, not a SIGBUS later) and publishes the name. Every other rank opens and maps it.
// Each rank votes (mapped, or why not); once every vote is in, rank 0 unlinks the name, so nothing
// stays in /dev/shm when the processes end, however they end. Shared memory is used only when
// every vote is yes. A first barrier through the segment then checks that the ranks really share
// it.
//
// Waiting spins briefly, then sleeps on a futex in the segment (the ranks may have fewer cores
// than there are of them; a waiter must hand its core to the rank it waits for). While asleep it
// wakes every 20 ms to see whether a rank it still waits for has exited (each rank holds a lock on
// the segment that the kernel drops when its process ends, in any pid namespace) or whether any
// rank has left the group (its communicator failed or was destroyed): then the collective fails
// with UNAVAILABLE. A rank that is only slow is waited for until the operation timeout
// (DEADLINE_EXCEEDED), or until Abort: a rank that is stopped, not gone, looks alive here, and
// only the coordinator's heartbeats can tell. After a failure the communicator stays broken and
// every later call returns the first error (the GlooCommunicator contract); recover by forming a
// new group.
//
// Results are identical on every rank and independent of the message size: each element is summed
// in rank order, ((x0 + x1) + x2) + ..., whichever rank computes it.
//
// A child forked (without exec) after Create shares the segment's open file, and with it the
// lock: this rank then looks alive until the child ends too.
//
// Thread-safety: none. Calls come from the worker's execution thread only, in the same order on
// every rank (see communicator.h).
#pragma once

#include <atomic>
#include <cstdint>
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
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace tpserve {

class ShmSegment;  // shm_segment.h: the mapping and the typed views into it

struct ShmOptions {
  // Deadline for the whole rendezvous, from the start of Create.
  absl::Duration connect_timeout = absl::Seconds(30);
  // Deadline for one collective, from its start on this rank.
  absl::Duration operation_timeout = absl::Seconds(30);
  // Floats of one rank that one step of a large all-reduce or gather stages, in bytes (rounded up
  // to 64). The segment holds 2 × (world_size + 1) such buffers.
  int64_t chunk_bytes = int64_t{1} << 20;
  // Take part in the rendezvous but vote against shared memory, so that every rank of the group
  // gets FAILED_PRECONDITION and falls back to Gloo with the others (--cpu-comm=gloo).
  bool decline = false;
};

class ShmCommunicator : public Communicator {
 public:
  // Joins the group of `world_size` ranks as `rank`. Errors: FAILED_PRECONDITION (the same on
  // every rank) when some rank declined or could not create or map the segment, naming it and
  // why; DEADLINE_EXCEEDED when a rank did not join within `options.connect_timeout`;
  // UNAVAILABLE when the store fails. The store's keys must be fresh for this group.
  static absl::StatusOr<std::unique_ptr<ShmCommunicator>> Create(
      int rank, int world_size, std::shared_ptr<gloo::rendezvous::Store> store,
      const ShmOptions& options);

  // Leaves the group: a rank still waiting for this one fails at once instead of at its timeout.
  ~ShmCommunicator() override;
  ShmCommunicator(const ShmCommunicator&) = delete;
  ShmCommunicator& operator=(const ShmCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }

  // Up to 64 KiB (and one chunk): one barrier; every rank sums every rank's input. Larger: in
  // chunks, each rank sums its 1/n slice of the chunk and all copy the sums, one barrier per chunk
  // plus one (the next chunk is staged while the previous one's sums are read).
  absl::Status AllReduceSum(float* data, int64_t count) override;

  // Ranks stage their floats, one chunk per barrier; rank 0 copies them into `recv`. A gather in
  // which every count is 0 passes no barrier.
  absl::Status GatherToRoot(const float* send, absl::Span<const int64_t> counts,
                            float* recv) override;

  // Rank 0's `*bytes` replace every other rank's (the step rank 0 relays, worker/step_relay.h):
  // one chunk per barrier, the first led by the length, each waited for up to the operation
  // timeout, except that with `await_root` a rank waits for rank 0's first chunk without a
  // deadline (for the next step): until rank 0 sends, leaves the group or exits, or until Abort.
  absl::Status BroadcastBytes(std::string* bytes, bool await_root);

  // A wait in progress or to come fails with UNAVAILABLE within one liveness period (20 ms), and
  // this rank leaves the group, so the ranks waiting for it fail too.
  void Abort(absl::string_view reason) override;

  // The segment's name in /dev/shm, already unlinked when Create returns.
  const std::string& segment_name() const;

 private:
  ShmCommunicator(int rank, int world_size, const ShmOptions& options,
                  std::unique_ptr<ShmSegment> segment);

  // Arrives at the next barrier and waits until every rank has, by `deadline` (`timeout` after
  // the start of `op`, for the message).
  absl::Status Barrier(const char* op, absl::Time deadline, absl::Duration timeout);
  // OK once `peer` has arrived at barrier `target`.
  absl::Status WaitFor(const char* op, int peer, uint32_t target, absl::Time deadline,
                       absl::Duration timeout);
  // UNAVAILABLE when a rank that has not reached `target` has exited or left the group.
  absl::Status CheckPending(const char* op, uint32_t target);
  // UNAVAILABLE when any rank has left the group, also one that had arrived: it left while
  // waiting (aborted), so it will not come to the next barrier, though no rank this one waits
  // for is known gone. A rank that takes its steps from rank 0 (step_relay.h) learns so only
  // here, having no coordinator call that would abort its wait for a stopped third rank.
  absl::Status CheckNoneLeft(const char* op);
  // Records the first failure and leaves the group.
  absl::Status Fail(absl::Status status);
  // Marks this rank's barrier word as left and wakes whoever sleeps on it.
  void Leave();
  std::string Context(const char* op) const;
  float* In(uint32_t barrier, int rank) const;  // the staging buffer written before `barrier`
  float* Out(uint32_t barrier) const;           // the sums written after `barrier`

  // Constant after construction.
  const int rank_;
  const int world_size_;
  const absl::Duration operation_timeout_;
  const int64_t chunk_floats_;
  const std::unique_ptr<ShmSegment> segment_;
  const int spin_iterations_;  // before sleeping; fewer when the ranks outnumber the cores

  // Set once by Abort (any thread); polled by WaitFor.
  std::atomic<bool> aborted_{false};
  absl::Mutex abort_mutex_;
  std::string abort_reason_ ABSL_GUARDED_BY(abort_mutex_);

  uint32_t barrier_ = 0;  // the barriers this rank has arrived at
  absl::Status error_;    // the first failure; OK while healthy
};

}  // namespace tpserve
