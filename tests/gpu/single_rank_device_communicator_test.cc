// SingleRankDeviceCommunicator, the CUDA model's collectives in a world of one: the all-reduce
// leaves the data as it is, the gather copies on the stream (nothing when in place), and bad
// counts are INVALID_ARGUMENT. The argument checks touch no device, so they run everywhere.
#include "worker/comm/single_rank_device_communicator.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "kernels/cuda/bf16.h"
#include "tests/gpu/gpu_test_util.h"

namespace tpserve {
namespace {

using ::tpserve::cuda::bf16;

using gpu_test::DeviceArray;

std::vector<float> Iota(int64_t count) {
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = static_cast<float>(i);
  return values;
}

TEST(SingleRankDeviceCommunicatorTest, IsRankZeroOfOne) {
  SingleRankDeviceCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);
}

TEST(SingleRankDeviceCommunicatorTest, AllReduceLeavesTheData) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  SingleRankDeviceCommunicator comm;
  std::vector<bf16> host(256);
  for (size_t i = 0; i < host.size(); ++i) host[i] = cuda::ToBf16(static_cast<float>(i));
  DeviceArray<bf16> data(256);
  data.Upload(host);
  ASSERT_TRUE(comm.EnqueueAllReduceSum(data.get(), 256, /*stream=*/nullptr).ok());
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
  EXPECT_EQ(cuda::ToFloat(data.Download()), cuda::ToFloat(host));
}

TEST(SingleRankDeviceCommunicatorTest, GatherCopiesOnTheStream) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  SingleRankDeviceCommunicator comm;
  DeviceArray<float> send(100), recv(100);
  send.Upload(Iota(100));
  recv.Upload(std::vector<float>(100, -1.0f));
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<int64_t> counts = {100};
  ASSERT_TRUE(comm.EnqueueGatherToRoot(send.get(), counts, recv.get(), stream).ok());
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_EQ(recv.Download(), Iota(100));
}

TEST(SingleRankDeviceCommunicatorTest, GatherInPlaceLeavesTheData) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  SingleRankDeviceCommunicator comm;
  DeviceArray<float> data(100);
  data.Upload(Iota(100));
  const std::vector<int64_t> counts = {100};
  ASSERT_TRUE(comm.EnqueueGatherToRoot(data.get(), counts, data.get(), /*stream=*/nullptr).ok());
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
  EXPECT_EQ(data.Download(), Iota(100));
}

TEST(SingleRankDeviceCommunicatorTest, BadCountsAreInvalidArgument) {
  SingleRankDeviceCommunicator comm;
  const std::vector<int64_t> two = {1, 1};
  const std::vector<int64_t> negative = {-1};
  EXPECT_EQ(comm.EnqueueGatherToRoot(nullptr, two, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.EnqueueGatherToRoot(nullptr, negative, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.EnqueueAllReduceSum(nullptr, -1, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SingleRankDeviceCommunicatorTest, SendAndRecvHaveNoPeer) {
  SingleRankDeviceCommunicator comm;
  EXPECT_EQ(comm.EnqueueSend(nullptr, 4, 1, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.EnqueueRecv(nullptr, 4, 1, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve
