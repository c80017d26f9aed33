// KvBlocksForUtilization: the CUDA pool size from --gpu-memory-utilization, against arithmetic
// done by hand.
#include "worker/kv_budget.h"

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace tpserve
