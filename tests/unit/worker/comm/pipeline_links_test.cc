// PipelineLinks across three forked ranks, one per stage: stage 0 sends a hidden state, stage 1
// receives it, adds its own part and sends it on, stage 2 receives the sum; through shared memory
// and through Gloo, with transfers longer than one shared-memory chunk. An aborted link fails the
// transfer waiting on it, and the first and last stages refuse what they have no link for.
#include "worker/comm/pipeline_links.h"

#include <gloo/rendezvous/prefix_store.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/unit/worker/comm/rank_processes.h"
#include "worker/comm/cpu_group.h"

namespace tpserve::comm_test {
namespace {

constexpr absl::Duration kWorldTimeout = absl::Seconds(60);
constexpr int kStages = 3;

// The link between stage `boundary` and the next, from `stage`'s side: the receiver is rank 0.
absl::StatusOr<std::unique_ptr<Communicator>> Link(int stage, int boundary, Store store,
                                                   CpuTransport transport) {
  CpuGroupOptions options;
  options.transport = transport;
  options.gloo.host = "127.0.0.1";
  options.shm.chunk_bytes = 4096;  // so that a transfer takes several chunks
  auto prefixed =
      std::make_shared<gloo::rendezvous::PrefixStore>(absl::StrCat("link", boundary), *store);
  absl::StatusOr<CpuGroup> group =
      CreateCpuGroup(stage == boundary ? 1 : 0, 2, std::move(prefixed), options);
  if (!group.ok()) return group.status();
  return std::move(group->comm);
}

absl::StatusOr<PipelineLinks*> Join(int stage, Store store, CpuTransport transport,
                                    PipelineLinks* links) {
  std::unique_ptr<Communicator> from_previous, to_next;
  if (stage > 0) {
    absl::StatusOr<std::unique_ptr<Communicator>> link = Link(stage, stage - 1, store, transport);
    if (!link.ok()) return link.status();
    from_previous = *std::move(link);
  }
  if (stage + 1 < kStages) {
    absl::StatusOr<std::unique_ptr<Communicator>> link = Link(stage, stage, store, transport);
    if (!link.ok()) return link.status();
    to_next = *std::move(link);
  }
  links->Reset(std::move(from_previous), std::move(to_next));
  return links;
}

// Stage s contributes s + 1 + i / 1000 to element i.
float Part(int stage, int64_t i) { return static_cast<float>(stage + 1) + i / 1000.0f; }

absl::StatusOr<std::string> RunChain(int stage, Store store, CpuTransport transport) {
  PipelineLinks links;
  if (absl::StatusOr<PipelineLinks*> joined = Join(stage, store, transport, &links); !joined.ok()) {
    return joined.status();
  }
  constexpr int64_t kCount = 3000;  // 12,000 bytes: three shared-memory chunks
  std::vector<float> hidden(kCount, 0.0f);
  if (stage == 0) {
    const absl::Status refused = links.Receive(hidden.data(), kCount);
    if (refused.code() != absl::StatusCode::kFailedPrecondition) {
      return absl::InternalError(absl::StrCat("stage 0 received: ", refused.ToString()));
    }
  } else if (absl::Status s = links.Receive(hidden.data(), kCount); !s.ok()) {
    return s;
  }
  for (int64_t i = 0; i < kCount; ++i) hidden[i] += Part(stage, i);
  if (stage + 1 < kStages) {
    if (absl::Status s = links.Send(hidden.data(), kCount); !s.ok()) return s;
    return std::string("sent");
  }
  const absl::Status refused = links.Send(hidden.data(), kCount);
  if (refused.code() != absl::StatusCode::kFailedPrecondition) {
    return absl::InternalError(absl::StrCat("the last stage sent: ", refused.ToString()));
  }
  for (int64_t i = 0; i < kCount; ++i) {
    float want = 0.0f;
    for (int s = 0; s < kStages; ++s) want += Part(s, i);
    if (std::abs(hidden[i] - want) > 1e-4f) {
      return absl::InternalError(absl::StrCat("element ", i, ": ", hidden[i], ", want ", want));
    }
  }
  return std::string("received the sum of every stage's part");
}

TEST(PipelineLinksTest, HiddenStatesPassStageToStageThroughSharedMemory) {
  ExpectAllPassed(RunRanks(AllRanks(kStages), kWorldTimeout, [](int stage, Store store) {
    return RunChain(stage, store, CpuTransport::kShm);
  }));
}

TEST(PipelineLinksTest, HiddenStatesPassStageToStageThroughGloo) {
  ExpectAllPassed(RunRanks(AllRanks(kStages), kWorldTimeout, [](int stage, Store store) {
    return RunChain(stage, store, CpuTransport::kGloo);
  }));
}

TEST(PipelineLinksTest, AnAbortedLinkFailsTheReceiveWaitingOnIt) {
  ExpectAllPassed(RunRanks(
      AllRanks(2), kWorldTimeout, [](int stage, Store store) -> absl::StatusOr<std::string> {
        // Two stages: stage 1 waits for a hidden state that never comes, and aborts; stage 0
        // stays in the link until stage 1 says its receive ended, so only the abort can end it.
        PipelineLinks links;
        absl::StatusOr<std::unique_ptr<Communicator>> link =
            Link(stage, 0, store, CpuTransport::kShm);
        if (!link.ok()) return link.status();
        if (stage == 0) {
          links.Reset(nullptr, *std::move(link));
          store->wait({"receive_ended"});
          return std::string("sent nothing");
        }
        links.Reset(*std::move(link), nullptr);
        std::thread aborter([&] {
          absl::SleepFor(absl::Milliseconds(300));
          links.Abort("the test gives the step up");
        });
        float hidden[4];
        const absl::Status status = links.Receive(hidden, 4);
        aborter.join();
        store->set("receive_ended", {1});
        if (!absl::StrContains(status.message(), "the test gives the step up")) {
          return absl::InternalError(
              absl::StrCat("the receive did not end by the abort: ", status.ToString()));
        }
        return absl::StrCat("the receive failed: ", status.ToString());
      }));
}

}  // namespace
}  // namespace tpserve::comm_test
