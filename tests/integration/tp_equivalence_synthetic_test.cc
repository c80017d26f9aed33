// A random-weight model with 8 heads and 4 KV heads gives the same logits at T = 1, 2, 4 and 8
// (T = 8 replicates each KV head on two ranks), through shared memory and through Gloo. T = 2 on
// SmolLM2 (9 heads) is refused at start-up.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

TEST(TpEquivalenceSynthetic, SameLogitsAtEveryTensorParallelSize) {
  const std::string model =
      (std::filesystem::temp_directory_path() / ("tpserve-synthetic-" + std::to_string(getpid()) + ".gguf"))
          .string();
  const CommandResult made = RunCommand(
      {std::string(TPSERVE_BIN_DIR) + "/tpserve-mkmodel", "--output", model, "--layers", "2",
       "--hidden", "256", "--heads", "8", "--kv-heads", "4", "--ffn", "384", "--vocab", "520",
       "--seed", "7"},
      absl::Seconds(60));
  ASSERT_TRUE(made.finished && WIFEXITED(made.wait_status) && WEXITSTATUS(made.wait_status) == 0)
      << made.output;
  const std::vector<int32_t> prompt = {1, 40, 41, 42, 100, 200, 7, 300, 259, 260, 3, 99,
                                       17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28};
  // Every size through shared memory (the automatic choice on one host), and T=4 once more
  // through Gloo, so both CPU transports stay tested.
  struct Case {
    int world;
    std::string cpu_comm;
    std::string transport;  // what the workers must report
  };
  const std::vector<Case> cases = {{1, "auto", ""},
                                   {2, "auto", "shared memory"},
                                   {4, "auto", "shared memory"},
                                   {8, "auto", "shared memory"},
                                   {4, "gloo", "Gloo over TCP"}};
  std::vector<std::vector<float>> reference;
  for (const Case& c : cases) {
    const std::string name = absl::StrCat("T=", c.world, " --cpu-comm ", c.cpu_comm);
    LocalClusterOptions options = ClusterOptions(model, c.world);
    options.worker_args = {"--cpu-comm", c.cpu_comm};
    auto cluster = StartServing(options, absl::Seconds(60));
    ASSERT_TRUE(cluster.ok()) << name << ": " << cluster.status();
    for (int rank = 0; rank < c.world && c.world > 1; ++rank) {
      EXPECT_TRUE(absl::StartsWith((*cluster)->WorkerCpuTransport(rank), c.transport))
          << name << ", rank " << rank << ": '" << (*cluster)->WorkerCpuTransport(rank) << "'";
    }
    auto logits = Score(**cluster, prompt);
    ASSERT_TRUE(logits.ok()) << name << ": " << logits.status() << LogTails(options);
    ASSERT_EQ(logits->size(), prompt.size());
    if (c.world == 1) {
      reference = *logits;
      continue;
    }
    double max_diff = 0;
    for (size_t i = 0; i < prompt.size(); ++i) {
      ASSERT_EQ((*logits)[i].size(), reference[i].size());
      for (size_t v = 0; v < reference[i].size(); ++v) {
        max_diff = std::max<double>(max_diff, std::fabs((*logits)[i][v] - reference[i][v]));
      }
    }
    std::printf("%s: max |logit difference| to T=1 = %.3e\n", name.c_str(), max_diff);
    EXPECT_LE(max_diff, 1e-3) << name;
  }
  std::filesystem::remove(model);
}

TEST(TpEquivalenceSynthetic, SmolLM2RefusesTwoRanks) {
  const CommandResult result = RunCommand(
      {std::string(TPSERVE_BIN_DIR) + "/tpserve-coordinator", "--model", TPSERVE_MODEL_PATH,
       "--world-size", "2", "--host", "127.0.0.1", "--port", "0"},
      absl::Seconds(30));
  ASSERT_TRUE(result.finished) << "the coordinator did not exit: " << result.output;
  EXPECT_TRUE(WIFEXITED(result.wait_status) && WEXITSTATUS(result.wait_status) != 0);
  EXPECT_NE(result.output.find("9 attention heads"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("1, 3, 9"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace tpserve::testing
