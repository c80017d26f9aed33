// tpserve-bench end to end on a T=1 cluster of a tiny synthetic model: a warm-up and 4 measured
// requests with a shared prefix all complete, and the JSON report counts them with positive
// throughput.
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "model/synthetic_model.h"
#include "nlohmann/json.hpp"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

TEST(ServingBenchSmoke, FourRequestsInTheJsonReport) {
  char dir_template[] = "/tmp/tpserve-bench-smoke-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string model = dir + "/model.gguf";
  const std::string report_path = dir + "/report.json";
  SyntheticModelSpec spec;
  spec.layers = 1;
  spec.hidden = 64;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ffn = 128;
  ASSERT_TRUE(WriteSyntheticModel(spec, model).ok());

  const std::string bench = std::string(TPSERVE_BIN_DIR) + "/tpserve-bench";
  const std::string vocab = std::to_string(spec.vocab);
  // Prompt ids in [259, vocab): the filler tokens, past the specials and the bytes.
  const std::vector<std::string> argv = {
      bench,      "--model",        model, "--tp",          "1",   "--log-dir",
      dir,        "--num-requests", "4",   "--concurrency", "2",   "--warmup",
      "1",        "--input-len",    "16",  "--output-len",  "8",   "--shared-prefix-len",
      "32",       "--vocab-min",    "259", "--vocab-max",   vocab, "--json",
      report_path};
  const CommandResult run = RunCommand(argv, absl::Seconds(120));
  std::printf("%s", run.output.c_str());
  ASSERT_TRUE(run.finished && WIFEXITED(run.wait_status) && WEXITSTATUS(run.wait_status) == 0)
      << run.output;

  std::ifstream in(report_path);
  const nlohmann::json report = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(report.is_discarded()) << report_path;
  EXPECT_EQ(report["completed"], 4);
  EXPECT_EQ(report["failed"], 0);
  EXPECT_GT(report["requests_per_s"].get<double>(), 0);
  EXPECT_GT(report["output_tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(report["completion_tokens"], 4 * 8);
  EXPECT_EQ(report["prompt_tokens"], 4 * (32 + 16));
  EXPECT_EQ(report["ttft_ms"]["count"], 4);
  EXPECT_EQ(report["itl_ms"]["count"], 4 * 7);
  const double shared_hit_rate = report["shared_prefix_hit_rate"].get<double>();
  EXPECT_GE(shared_hit_rate, 0);
  EXPECT_LE(shared_hit_rate, 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tpserve::testing
