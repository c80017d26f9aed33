// Ranks of a communicator test as real processes: the test forks one child per rank; the children
// meet through a FileStore in a fresh temp directory. The parent never creates communicators (a
// fork must not copy Gloo's I/O threads), waits for the children with a deadline, kills them all
// if one hangs, and reports each failing child's message.
#pragma once

#include <gloo/rendezvous/store.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tpserve::comm_test {

struct RankResult {
  int rank = -1;
  bool passed = false;
  std::string message;  // The child's note or error, or how it died.
};

using Store = std::shared_ptr<gloo::rendezvous::Store>;

// One rank's side of a scenario: OK with a note for the log, or the reason it failed.
using WorldBody = std::function<absl::StatusOr<std::string>(int rank, Store store)>;

// Runs `body(rank, store)` in a child process for each of `ranks`, all sharing a FileStore in a
// fresh directory (removed afterwards). Returns when all have exited or `timeout` has passed (the
// rest are then killed), one result per rank in `ranks` order.
std::vector<RankResult> RunRanks(const std::vector<int>& ranks, absl::Duration timeout,
                                 const WorldBody& body);

// 0, 1, ..., world_size - 1.
std::vector<int> AllRanks(int world_size);

// The same without `missing`: a world in which one rank never starts.
std::vector<int> AllRanksBut(int world_size, int missing);

// One EXPECT per rank: it passed, or its message.
void ExpectAllPassed(const std::vector<RankResult>& results);

}  // namespace tpserve::comm_test
