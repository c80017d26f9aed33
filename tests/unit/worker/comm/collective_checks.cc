#include "tests/unit/worker/comm/collective_checks.h"

#include <thread>

#include "absl/time/clock.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tpserve::comm_test {

absl::StatusOr<std::string> CheckAllReduce(Communicator& comm, const std::vector<int64_t>& counts) {
  const int rank = comm.rank(), world_size = comm.world_size();
  for (const int64_t count : counts) {
    std::vector<float> data(count);
    for (int64_t i = 0; i < count; ++i) data[i] = (rank + 1) * 1000 + i % 1000;
    if (absl::Status s = comm.AllReduceSum(data.data(), count); !s.ok()) return s;
    for (int64_t i = 0; i < count; ++i) {
      const float want = 1000 * world_size * (world_size + 1) / 2 + world_size * (i % 1000);
      if (data[i] != want) {
        return absl::InternalError(
            absl::StrCat("count ", count, ": element ", i, " is ", data[i], ", want ", want));
      }
    }
  }
  return absl::StrCat("all-reduced ", absl::StrJoin(counts, ", "), " floats");
}

absl::StatusOr<std::string> CheckRankOrderSum(Communicator& comm,
                                              const std::vector<int64_t>& counts) {
  const int rank = comm.rank(), n = comm.world_size();
  auto input = [](int r, int64_t i) {
    return std::sin(0.37f * static_cast<float>(i) + r) * std::pow(10.0f, (i + r) % 7 - 3);
  };
  for (const int64_t count : counts) {
    // Stored first: a sum of the expressions themselves could be contracted into FMAs.
    std::vector<std::vector<float>> inputs(n, std::vector<float>(count));
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < count; ++i) inputs[r][i] = input(r, i);
    }
    std::vector<float> data = inputs[rank];
    if (absl::Status s = comm.AllReduceSum(data.data(), count); !s.ok()) return s;
    for (int64_t i = 0; i < count; ++i) {
      float want = inputs[0][i];
      for (int r = 1; r < n; ++r) want += inputs[r][i];
      if (std::memcmp(&data[i], &want, sizeof(float)) != 0) {
        return absl::InternalError(
            absl::StrCat("count ", count, ": element ", i, " is ", data[i], ", want ", want));
      }
    }
  }
  return absl::StrCat("rank-order sums of ", absl::StrJoin(counts, ", "), " floats");
}

absl::StatusOr<std::string> CheckGather(Communicator& comm, const std::vector<int64_t>& counts) {
  const int rank = comm.rank(), world_size = comm.world_size();
  for (int round = 0; round < 2; ++round) {
    std::vector<float> send(counts[rank]);
    for (int64_t j = 0; j < counts[rank]; ++j) send[j] = round * 1000 + rank * 100 + j % 100;
    std::vector<float> want;  // Rank 0's expected result.
    for (int r = 0; r < world_size; ++r) {
      for (int64_t j = 0; j < counts[r]; ++j) want.push_back(round * 1000 + r * 100 + j % 100);
    }
    std::vector<float> recv(rank == 0 ? want.size() : 0);
    absl::Status s = comm.GatherToRoot(send.data(), counts, rank == 0 ? recv.data() : nullptr);
    if (!s.ok()) return s;
    if (rank == 0 && recv != want) {
      const auto diff = std::mismatch(recv.begin(), recv.end(), want.begin());
      return absl::InternalError(absl::StrCat("round ", round, ": element ",
                                              diff.first - recv.begin(), " is ", *diff.first,
                                              ", want ", *diff.second));
    }
  }
  return absl::StrCat("gathered ", absl::StrJoin(counts, ", "), " floats");
}

absl::StatusOr<std::string> CheckMissingPeer(const absl::Status& status, absl::Duration took,
                                             int rank, int world_size, int missing,
                                             absl::Duration connect_timeout) {
  if (status.ok()) return absl::InternalError("Create succeeded without all ranks");
  if (status.code() != absl::StatusCode::kDeadlineExceeded ||
      !absl::StrContains(status.message(), absl::StrCat("rank ", rank, " of ", world_size)) ||
      !absl::StrContains(status.message(), absl::StrCat("rank ", missing))) {
    return absl::InternalError(absl::StrCat("want DEADLINE_EXCEEDED naming rank ", rank,
                                            " and missing rank ", missing, "; got ",
                                            status.ToString()));
  }
  if (took > connect_timeout + absl::Seconds(2)) {
    return absl::InternalError(absl::StrCat("gave up after ", absl::FormatDuration(took)));
  }
  return absl::StrCat("after ", absl::FormatDuration(took), ": ", status.ToString());
}

absl::StatusOr<std::string> CheckStickyFailure(const absl::Status& first, const absl::Status& again,
                                               int rank, int world_size,
                                               const std::vector<absl::StatusCode>& codes) {
  if (first.ok() || again != first ||
      std::find(codes.begin(), codes.end(), first.code()) == codes.end() ||
      !absl::StrContains(first.message(), absl::StrCat("rank ", rank, " of ", world_size))) {
    std::vector<std::string> names;
    for (const absl::StatusCode code : codes) names.push_back(absl::StatusCodeToString(code));
    return absl::InternalError(absl::StrCat("want a sticky ", absl::StrJoin(names, " or "),
                                            " naming this rank; got ", first.ToString(), " then ",
                                            again.ToString()));
  }
  return first.ToString();
}

absl::StatusOr<std::string> CheckAbandonedWait(Communicator& comm, absl::Duration silence,
                                               absl::Duration abort_after) {
  std::vector<float> data(1000, 1.0f);
  if (absl::Status s = comm.AllReduceSum(data.data(), 1000); !s.ok()) return s;
  if (comm.rank() == 2) {
    absl::SleepFor(silence);
    return std::string("silent, then back");
  }
  std::thread aborter([&comm, abort_after] {
    absl::SleepFor(abort_after);
    comm.Abort("the coordinator abandoned step 7");
  });
  const absl::Time begin = absl::Now();
  const absl::Status first = comm.AllReduceSum(data.data(), 1000);
  const absl::Duration took = absl::Now() - begin;
  aborter.join();
  const absl::Status again = comm.AllReduceSum(data.data(), 1000);
  if (first.code() != absl::StatusCode::kUnavailable || again.ok()) {
    return absl::InternalError(absl::StrCat("want UNAVAILABLE, then a failure; got ",
                                            first.ToString(), " then ", again.ToString()));
  }
  if (took > abort_after + absl::Seconds(2)) {
    return absl::InternalError(absl::StrCat("the abandoned all-reduce took ",
                                            absl::FormatDuration(took), ": ", first.ToString()));
  }
  return absl::StrCat(absl::FormatDuration(took), ": ", first.ToString());
}

}  // namespace tpserve::comm_test
