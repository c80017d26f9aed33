// `tpctl status` against a T=3 cluster: a table row per rank, JSON with every shard, and a clear
// one-line failure naming the address once the cluster is gone. `tpctl flush-cache` and
// `tpctl drain` on the same cluster, and against a coordinator that is still starting.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

const std::string kTpctl = std::string(TPSERVE_BIN_DIR) + "/tpctl";

bool ExitedZero(const CommandResult& r) {
  return r.finished && WIFEXITED(r.wait_status) && WEXITSTATUS(r.wait_status) == 0;
}

TEST(TpctlStatus, TableJsonAndUnreachable) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  auto started = StartServing(options, absl::Seconds(180));
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  const std::string address = cluster.admin_address();

  const CommandResult table =
      RunCommand({kTpctl, "--coordinator", address, "status"}, absl::Seconds(10));
  std::printf("tpctl status:\n%s", table.output.c_str());
  EXPECT_TRUE(ExitedZero(table)) << table.output;
  EXPECT_NE(table.output.find("cluster serving"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("requests: 0 running, 0 waiting; 0 preemptions"), std::string::npos)
      << table.output;
  // One row per rank: "<rank>  <address> ... <state> <weights MiB> ..."
  int rows = 0;
  for (absl::string_view line : absl::StrSplit(table.output, '\n')) {
    std::vector<std::string> cols = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cols.size() < 6 || cols[0] != std::to_string(rows)) continue;
    EXPECT_TRUE(cols[4] == "loaded" || cols[4] == "serving") << line;
    EXPECT_GT(std::stod(cols[5]), 0.0) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 3) << table.output;

  // Options go before or after the command.
  const CommandResult after =
      RunCommand({kTpctl, "--coordinator", address, "status", "--json"}, absl::Seconds(10));
  EXPECT_TRUE(ExitedZero(after)) << after.output;
  EXPECT_FALSE(nlohmann::json::parse(after.output, nullptr, false).is_discarded()) << after.output;
  const CommandResult json =
      RunCommand({kTpctl, "--coordinator", address, "--json", "status"}, absl::Seconds(10));
  EXPECT_TRUE(ExitedZero(json)) << json.output;
  const nlohmann::json parsed = nlohmann::json::parse(json.output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << json.output;
  EXPECT_EQ(parsed["state"], "STATE_SERVING") << json.output;
  ASSERT_EQ(parsed["shards"].size(), 3u) << json.output;
  for (int rank = 0; rank < 3; ++rank) {
    const nlohmann::json& shard = parsed["shards"][rank];
    EXPECT_EQ(shard["rank"], rank);
    EXPECT_GT(std::stoll(shard["weight_bytes"].get<std::string>()), 0);  // int64: a JSON string
  }

  // A greedy continuation leaves its full blocks in the prefix cache.
  const std::vector<int32_t> prompt = GoldenPromptIds().front();
  ASSERT_TRUE(GenerateGreedy(cluster, prompt, 8).ok());
  const CommandResult flush =
      RunCommand({kTpctl, "--coordinator", address, "flush-cache"}, absl::Seconds(10));
  std::printf("tpctl flush-cache after a %zu-token prompt: %s", prompt.size(),
              flush.output.c_str());
  EXPECT_TRUE(ExitedZero(flush)) << flush.output;
  int flushed = -1;
  EXPECT_EQ(std::sscanf(flush.output.c_str(), "flushed %d cached block", &flushed), 1)
      << flush.output;
  EXPECT_GT(flushed, 0) << flush.output;
  // ClusterStatus shows the engine's stats as of its last loop, which may trail the flush a little.
  int64_t cached = -1;
  for (const absl::Time until = absl::Now() + absl::Seconds(2); cached != 0 && absl::Now() < until;
       absl::SleepFor(absl::Milliseconds(20))) {
    auto after_flush = ClusterStatus(cluster);
    ASSERT_TRUE(after_flush.ok()) << after_flush.status();
    cached = after_flush->kv_blocks_cached();
  }
  EXPECT_EQ(cached, 0);

  const CommandResult drain =
      RunCommand({kTpctl, "--coordinator", address, "drain"}, absl::Seconds(10));
  std::printf("tpctl drain: %s", drain.output.c_str());
  EXPECT_TRUE(ExitedZero(drain)) << drain.output;
  EXPECT_EQ(drain.output, "draining: 0 requests in flight\n");
  const CommandResult drained =
      RunCommand({kTpctl, "--coordinator", address, "--json", "status"}, absl::Seconds(10));
  const nlohmann::json drained_json = nlohmann::json::parse(drained.output, nullptr, false);
  ASSERT_FALSE(drained_json.is_discarded()) << drained.output;
  EXPECT_EQ(drained_json["draining"], true) << drained.output;
  const auto refused = GenerateGreedy(cluster, prompt, 1);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("draining"), std::string::npos) << refused.status();

  cluster.StopAll();
  const CommandResult down = RunCommand({kTpctl, "--coordinator", address, "status"},
                                        absl::Seconds(10));
  std::printf("tpctl status after StopAll (%.2f s): %s", down.seconds, down.output.c_str());
  EXPECT_TRUE(down.finished);
  EXPECT_FALSE(ExitedZero(down)) << down.output;
  EXPECT_LT(down.seconds, 5.0);
  EXPECT_NE(down.output.find(address), std::string::npos) << down.output;
  std::filesystem::remove_all(options.log_dir);
}

// A coordinator waiting for its second rank answers: the failure names the call and the cause,
// not an unreachable address.
TEST(TpctlStatus, DrainWhileStarting) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, 3);
  options.ranks = {0};
  auto started = LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  const std::string address = (*started)->admin_address();
  for (const char* command : {"drain", "flush-cache"}) {
    const CommandResult r =
        RunCommand({kTpctl, "--coordinator", address, command}, absl::Seconds(10));
    std::printf("tpctl %s while starting: %s", command, r.output.c_str());
    EXPECT_FALSE(ExitedZero(r)) << r.output;
    EXPECT_NE(r.output.find(absl::StrCat(" on ", address, " failed: cluster is starting")),
              std::string::npos)
        << r.output;
  }
  (*started)->StopAll();
  std::filesystem::remove_all(options.log_dir);
}

}  // namespace
}  // namespace tpserve::testing
