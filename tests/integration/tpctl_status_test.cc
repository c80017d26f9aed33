// `tpctl status` against a T=3 cluster: a table row per rank, JSON with every shard, and a clear
// one-line failure naming the address once the cluster is gone.
#include <sys/wait.h>

#include <filesystem>
#include <sstream>

#include "absl/strings/str_split.h"
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
  const std::string address = cluster.address();

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

}  // namespace
}  // namespace tpserve::testing
