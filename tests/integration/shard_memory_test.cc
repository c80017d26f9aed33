// Tensor parallelism splits the weights: at T=3 each rank holds about a third of the sharded
// parts plus the replicated ones (token embedding and RMSNorm weights, as stored), and no rank
// holds the whole model. Sizes come from AdminService.ClusterStatus.
#include <cstdio>
#include <filesystem>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "model/dequantize.h"
#include "model/ggml_type.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "tests/integration/cluster_test_util.h"
#include "tpserve/v1/admin.grpc.pb.h"

namespace tpserve::testing {
namespace {

// Weight bytes per rank, by rank, of a fresh cluster of `world_size`.
std::vector<int64_t> ShardWeightBytes(int world_size) {
  LocalClusterOptions options = ClusterOptions(TPSERVE_MODEL_PATH, world_size);
  auto cluster = StartServing(options, absl::Seconds(180));
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  if (!cluster.ok()) return {};
  auto admin = v1::AdminService::NewStub(
      grpc::CreateChannel((*cluster)->admin_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ClusterStatusResponse response;
  const grpc::Status status = admin->ClusterStatus(&context, v1::ClusterStatusRequest(), &response);
  (*cluster)->StopAll();
  std::filesystem::remove_all(options.log_dir);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.shards_size(), world_size) << response.DebugString();
  std::vector<int64_t> bytes;
  for (const v1::ShardStatus& shard : response.shards()) {
    EXPECT_EQ(shard.rank(), static_cast<int>(bytes.size()));
    bytes.push_back(shard.weight_bytes());
  }
  return bytes;
}

TEST(ShardMemory, EachRankHoldsItsShareAndTheReplicatedParts) {
  auto file = GgufFile::Open(TPSERVE_MODEL_PATH);
  ASSERT_TRUE(file.ok()) << file.status();
  auto config = ModelConfig::FromGguf(**file);
  ASSERT_TRUE(config.ok()) << config.status();
  // Replicated on every rank, in bytes as stored: the token embedding [vocab, hidden], kept in its
  // GGUF blocks when it is Q4_0/Q4_1/Q8_0 (worker/model_weights.h KeepsBlocks) and fp32
  // otherwise, and every RMSNorm weight [hidden] (two per layer and the final one), fp32.
  const GgufTensorInfo* embedding = (*file)->FindTensor("token_embd.weight");
  ASSERT_NE(embedding, nullptr);
  const int64_t embedding_elements = config->vocab_size * config->hidden_size;
  const bool blocks = embedding->type == GgmlType::kQ4_0 || embedding->type == GgmlType::kQ4_1 ||
                      embedding->type == GgmlType::kQ8_0;
  auto embedding_bytes = GgmlBytesFor(embedding->type, embedding_elements);
  ASSERT_TRUE(embedding_bytes.ok()) << embedding_bytes.status();
  const double replicated =
      (blocks ? static_cast<double>(*embedding_bytes) : 4.0 * embedding_elements) +
      4.0 * (2 * config->num_layers + 1) * config->hidden_size;

  const std::vector<int64_t> one = ShardWeightBytes(1);
  ASSERT_EQ(one.size(), 1u);
  const double w1 = static_cast<double>(one[0]);
  ASSERT_GT(w1, replicated);
  const double bound = 1.05 * ((w1 - replicated) / 3 + replicated);
  std::printf("shard_memory: T=1 W1 = %.0f bytes (%.1f MiB), replicated R = %.0f bytes "
              "(%.1f MiB); T=3 bound per rank 1.05*((W1-R)/3+R) = %.0f bytes (%.1f MiB)\n",
              w1, w1 / 1048576, replicated, replicated / 1048576, bound, bound / 1048576);

  const std::vector<int64_t> three = ShardWeightBytes(3);
  ASSERT_EQ(three.size(), 3u);
  int64_t sum = 0;
  for (size_t rank = 0; rank < three.size(); ++rank) {
    std::printf("shard_memory: T=3 rank %zu weight_bytes = %lld (%.1f MiB, %.3f of W1)\n", rank,
                static_cast<long long>(three[rank]), three[rank] / 1048576.0, three[rank] / w1);
    EXPECT_GT(three[rank], 0) << "rank " << rank;
    EXPECT_LE(static_cast<double>(three[rank]), bound) << "rank " << rank;
    sum += three[rank];
  }
  std::printf("shard_memory: T=3 sum = %lld bytes (%.3f of W1; must be < 3)\n",
              static_cast<long long>(sum), sum / w1);
  EXPECT_LT(static_cast<double>(sum), 3 * w1);
}

}  // namespace
}  // namespace tpserve::testing
