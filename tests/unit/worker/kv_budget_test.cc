// KvBlocksForUtilization: the CUDA pool size from --gpu-memory-utilization, against arithmetic
// done by hand.
#include "worker/kv_budget.h"

#include "gtest/gtest.h"
#include "worker/kv_cache.h"

namespace tpserve {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

TEST(KvBlocksForUtilization, FillsTheShareLeftAfterWhatIsUsed) {
  // 80 GiB device, 20 GiB used: 0.9 allows 72 GiB, minus 20 used and 512 MiB reserve = 51.5 GiB,
  // 52,736 blocks of 1 MiB.
  const DeviceMemory memory{80 * kGiB, 60 * kGiB};
  auto blocks = KvBlocksForUtilization(memory, 0.9, 512 * kMiB, kMiB, 1 << 30);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(*blocks, 52736);
}

TEST(KvBlocksForUtilization, PartialBlocksRoundDownAndTheCapHolds) {
  const DeviceMemory memory{10 * kMiB, 10 * kMiB};
  // 0.5 of 10 MiB = 5 MiB in 3 MiB blocks: 1 block.
  EXPECT_EQ(*KvBlocksForUtilization(memory, 0.5, 0, 3 * kMiB, 100), 1);
  EXPECT_EQ(*KvBlocksForUtilization(memory, 1.0, 0, kMiB, 4), 4);
}

TEST(KvBlocksForUtilization, NoRoomIsResourceExhaustedWithTheNumbers) {
  const DeviceMemory memory{16 * kGiB, 2 * kGiB};  // 14 GiB used: more than 0.8 allows
  auto blocks = KvBlocksForUtilization(memory, 0.8, 512 * kMiB, kMiB, 1 << 20);
  ASSERT_EQ(blocks.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(blocks.status().message().find("--gpu-memory-utilization 0.80"), std::string::npos)
      << blocks.status();
  EXPECT_NE(blocks.status().message().find("14336 MiB"), std::string::npos) << blocks.status();
}

TEST(KvBlocksForUtilization, RejectsUtilizationOutsideTheUnitInterval) {
  const DeviceMemory memory{kGiB, kGiB};
  for (double bad : {0.0, -0.5, 1.5}) {
    EXPECT_EQ(KvBlocksForUtilization(memory, bad, 0, kMiB, 10).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(KvBlocksForUtilization({kGiB, 2 * kGiB}, 0.5, 0, kMiB, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A CUDA rank of Llama-3-70B at TP 8 (80 layers, 1 of 8 KV heads, head_dim 128, blocks of 16):
// a block is 2 * 80 * 16 * 128 values = 327,680, so 640 KiB in bf16 and 320 KiB in FP8, and the
// 20 GiB left on a 141 GiB card at utilization 0.9 (126.9 GiB, 106.9 GiB in use) holds 32,768
// bf16 blocks or 65,536 FP8 ones.
TEST(KvBlocksForUtilization, Fp8KvDoublesTheCudaPool) {
  const KvCacheShape bf16 = KvCacheShape::For(80, 1, 128, 16, /*cuda=*/true, /*fp8=*/false);
  const KvCacheShape fp8 = KvCacheShape::For(80, 1, 128, 16, /*cuda=*/true, /*fp8=*/true);
  EXPECT_EQ(bf16.bytes_per_block(), 640 * 1024);
  EXPECT_EQ(fp8.bytes_per_block(), 320 * 1024);
  EXPECT_TRUE(fp8.fp8);
  const int64_t total = 141 * kGiB;
  const int64_t used = static_cast<int64_t>(0.9 * static_cast<double>(total)) - 20 * kGiB;
  const DeviceMemory memory{total, total - used};
  auto bf16_blocks = KvBlocksForUtilization(memory, 0.9, 0, bf16.bytes_per_block(), 1 << 30);
  auto fp8_blocks = KvBlocksForUtilization(memory, 0.9, 0, fp8.bytes_per_block(), 1 << 30);
  ASSERT_TRUE(bf16_blocks.ok() && fp8_blocks.ok());
  EXPECT_EQ(*bf16_blocks, 32768);
  EXPECT_EQ(*fp8_blocks, 65536);
  // The CPU pool holds fp32: FP8 is a quarter of its bytes.
  EXPECT_EQ(KvCacheShape::For(80, 1, 128, 16, /*cuda=*/false, /*fp8=*/false).bytes_per_block(),
            4 * fp8.bytes_per_block());
}

}  // namespace
}  // namespace tpserve
