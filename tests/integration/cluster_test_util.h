// What the integration tests share: starting a LocalCluster of the real binaries on 127.0.0.1
// with logs in a fresh directory, and calling it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/local_cluster.h"
#include "tpserve/v1/admin.pb.h"

namespace tpserve::testing {

// Options for a cluster of the binaries in this build, with logs in a new temporary directory.
LocalClusterOptions ClusterOptions(const std::string& model, int world_size);

// Starts the cluster and waits until it serves; the error carries the tail of every log.
absl::StatusOr<std::unique_ptr<LocalCluster>> StartServing(const LocalClusterOptions& options,
                                                           absl::Duration timeout);

// The last `lines` lines of every child's log, each headed by its file name.
std::string LogTails(const LocalClusterOptions& options, int lines = 20);

// Teacher-forced logits: [positions][vocab].
absl::StatusOr<std::vector<std::vector<float>>> Score(LocalCluster& cluster,
                                                      const std::vector<int32_t>& ids);

// A Generate request for the greedy continuation of `ids`: exactly `max_tokens` tokens (EOS
// ignored).
v1::GenerateRequest GreedyRequest(const std::vector<int32_t>& ids, int max_tokens);

// Greedy continuation of `ids`: exactly `max_tokens` tokens (EOS ignored).
absl::StatusOr<std::vector<int32_t>> GenerateGreedy(LocalCluster& cluster,
                                                    const std::vector<int32_t>& ids,
                                                    int max_tokens);

// The coordinator's AdminService.ClusterStatus.
absl::StatusOr<v1::ClusterStatusResponse> ClusterStatus(LocalCluster& cluster);

// Polls Health until the cluster serves: true, or false at `timeout`.
bool WaitForServing(LocalCluster& cluster, absl::Duration timeout);

// A serving cluster and the greedy answer it gave to a golden prompt before anything broke.
struct ServingCluster {
  std::unique_ptr<LocalCluster> cluster;
  std::vector<int32_t> prompt;
  std::vector<int32_t> answer;  // 8 tokens
};
absl::StatusOr<ServingCluster> StartWithAnswer(const LocalClusterOptions& options);

// After a process of the cluster was restarted at `restarted`: expects (gtest) that it serves
// again within 120 s, printing after how long under `test`, and answers the prompt as before.
void ExpectServesAgain(ServingCluster& serving, const LocalClusterOptions& options,
                       absl::Time restarted, const char* test);

// Token ids of the teacher-forced prompts in tests/golden/logits_top20.json.
std::vector<std::vector<int32_t>> GoldenPromptIds();

// The output of running `argv` to completion with a time limit: exit status and combined output.
struct CommandResult {
  bool finished = false;  // false: killed after the limit
  int wait_status = 0;
  double seconds = 0;
  std::string output;
};
CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration limit);

}  // namespace tpserve::testing
