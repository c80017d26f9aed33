// Checks of a Communicator's collectives and failures, shared by the tests of every
// implementation. Each runs inside one rank's process (rank_processes.h) and returns OK with a
// note, or what was wrong.
#pragma once

#include <gloo/rendezvous/file_store.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/comm/communicator.h"

namespace tpserve::comm_test {

// All-reduces `count` floats for each of `counts`: rank r contributes (r + 1) · 1000 + i mod 1000
// at element i, so every element must be exactly 1000 · n(n+1)/2 + n · (i mod 1000), whatever the
// summation order (every partial sum is an integer below 2^24).
absl::StatusOr<std::string> CheckAllReduce(Communicator& comm, const std::vector<int64_t>& counts);

// Inexact sums: for each of `counts`, every rank must end with the bits of summing the ranks'
// floats in rank order, (x_0 + x_1) + x_2 + ..., whatever the count (which moves the slices).
absl::StatusOr<std::string> CheckRankOrderSum(Communicator& comm,
                                              const std::vector<int64_t>& counts);

// Gathers counts[r] floats from each rank r, twice with different data (consecutive gathers must
// not mix); rank 0 checks the concatenation.
absl::StatusOr<std::string> CheckGather(Communicator& comm, const std::vector<int64_t>& counts);

// `status` is how joining a world of `world_size` without rank `missing` ended for `rank`, after
// `took`: it must be DEADLINE_EXCEEDED naming both ranks, within `connect_timeout` (plus slack
// for the store's polling).
absl::StatusOr<std::string> CheckMissingPeer(const absl::Status& status, absl::Duration took,
                                             int rank, int world_size, int missing,
                                             absl::Duration connect_timeout);

// `first` and `again` are two collectives after a peer's exit: the first must have failed with
// one of `codes` naming this rank, the second with the same error.
absl::StatusOr<std::string> CheckStickyFailure(const absl::Status& first, const absl::Status& again,
                                               int rank, int world_size,
                                               const std::vector<absl::StatusCode>& codes);

// A world of 3 whose rank 2 stays alive but silent (SIGSTOP-like) for `silence` after one
// all-reduce: ranks 0 and 1 wait for it in the next one until, `abort_after` in, another thread
// of theirs calls Abort (as a worker does when the coordinator cancels the step). They must fail
// UNAVAILABLE within 2 s of the abort, long before the operation timeout, and stay failed. Rank 2
// sleeps through it and returns.
absl::StatusOr<std::string> CheckAbandonedWait(Communicator& comm, absl::Duration silence,
                                               absl::Duration abort_after);

// Create(rank 3 of 3), Create(rank 0 of 0), Create with a null store, and Create with
// `bad_timeout` options must all be INVALID_ARGUMENT.
template <typename Comm, typename Options>
void ExpectCreateRejectsBadArguments(const Options& bad_timeout) {
  auto store = std::make_shared<gloo::rendezvous::FileStore>("/tmp");
  EXPECT_EQ(Comm::Create(3, 3, store, Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Comm::Create(0, 0, store, Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Comm::Create(0, 2, nullptr, Options()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Comm::Create(0, 2, store, bad_timeout).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace tpserve::comm_test
