// A real coordinator and worker with --device cuda on 127.0.0.1 against a CPU cluster on the same
// model: the teacher-forced logits of Score agree within bf16's bar (cuda_forward_pass_test says
// why 8%), greedy generation runs (decode through the CUDA graphs), and ClusterStatus names the
// GPU. With two GPUs, two pipeline stages against one GPU. The binaries are the ones beside this
// test (build/bin here, gpu-pkg/bin on the GPU machine).
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_model.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/integration/cluster_test_util.h"

namespace tpserve::testing {
namespace {

constexpr double kBf16Tolerance = 0.08;

LocalClusterOptions Options(bool cuda) {
  LocalClusterOptions options = ClusterOptions(gpu_test::GetTestModel().path, 1);
  options.bin_dir = std::filesystem::read_symlink("/proc/self/exe").parent_path().string();
  if (cuda) {
    options.coordinator_args = {"--device=cuda", "--max-num-seqs=16"};
    options.worker_args = {"--gpu-memory-utilization=0.3"};
  }
  return options;
}

std::vector<float> Flatten(const std::vector<std::vector<float>>& rows) {
  std::vector<float> flat;
  for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
  return flat;
}

TEST(CudaCluster, ScoresLikeTheCpuClusterAndGenerates) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(200 + (i * 53) % 3000);

  std::vector<float> want;
  {
    const LocalClusterOptions options = Options(/*cuda=*/false);
    auto cluster = StartServing(options, absl::Seconds(120));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    auto logits = Score(**cluster, ids);
    ASSERT_TRUE(logits.ok()) << logits.status() << "\n" << LogTails(options);
    want = Flatten(*logits);
  }
  const LocalClusterOptions options = Options(/*cuda=*/true);
  auto cluster = StartServing(options, absl::Seconds(300));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto logits = Score(**cluster, ids);
  ASSERT_TRUE(logits.ok()) << logits.status() << "\n" << LogTails(options);
  const double error = gpu_test::NormalizedError(Flatten(*logits), want);
  std::printf("cuda cluster: Score of %zu tokens, normalized error vs the CPU cluster %.4f\n",
              ids.size(), error);
  EXPECT_LE(error, kBf16Tolerance);

  auto tokens = GenerateGreedy(**cluster, ids, 24);
  ASSERT_TRUE(tokens.ok()) << tokens.status() << "\n" << LogTails(options);
  EXPECT_EQ(tokens->size(), 24u);
  auto status = ClusterStatus(**cluster);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->shards_size(), 1);
  EXPECT_EQ(status->shards(0).device().rfind("cuda:", 0), 0u) << status->shards(0).device();
}

// Two pipeline stages on two GPUs, their hand-off over NCCL send/recv: the same Score as one GPU
// running every layer (the stages run the same kernels on the same rows, and the residual moves
// as the bf16 it is), and greedy generation goes on through the stages.
TEST(CudaCluster, TwoPipelineStagesScoreLikeOneGpu) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(2);
  std::vector<int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(300 + (i * 71) % 3000);
  std::vector<float> want;
  std::vector<int32_t> want_tokens;
  {
    const LocalClusterOptions options = Options(/*cuda=*/true);
    auto cluster = StartServing(options, absl::Seconds(300));
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    auto logits = Score(**cluster, ids);
    ASSERT_TRUE(logits.ok()) << logits.status() << "\n" << LogTails(options);
    want = Flatten(*logits);
    auto tokens = GenerateGreedy(**cluster, ids, 16);
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    want_tokens = *tokens;
  }
  LocalClusterOptions options = Options(/*cuda=*/true);
  options.world_size = 2;
  options.coordinator_args.push_back("--pipeline-parallel-size=2");
  auto cluster = StartServing(options, absl::Seconds(300));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto logits = Score(**cluster, ids);
  ASSERT_TRUE(logits.ok()) << logits.status() << "\n" << LogTails(options);
  const double error = gpu_test::NormalizedError(Flatten(*logits), want);
  std::printf("cuda pipeline: Score of %zu tokens in 2 stages, normalized error vs 1 GPU %.6f\n",
              ids.size(), error);
  EXPECT_LE(error, 1e-3);
  auto tokens = GenerateGreedy(**cluster, ids, 16);
  ASSERT_TRUE(tokens.ok()) << tokens.status() << "\n" << LogTails(options);
  EXPECT_EQ(*tokens, want_tokens);
  auto status = ClusterStatus(**cluster);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->shards_size(), 2);
  EXPECT_EQ(status->shards(1).stage(), 1);
}

}  // namespace
}  // namespace tpserve::testing
