// NcclCommunicator on real GPUs: a world of 1, and a world of N = the number of visible devices
// (ranks as threads, rank r on device r) when N > 1, and a two-rank pipeline link's send/recv. The
// ranks meet through an in-process gloo::rendezvous::HashStore. Both sides are checked: the
// Communicator (blocking, on the communicator's stream) and the DeviceCommunicator (enqueued on a
// caller's stream, as the CUDA model uses it). Values are small integers, so the sums are exact in
// float and in bf16.
#include "worker/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "common/cuda_check.h"
#include "kernels/cuda/bf16.h"
#include "tests/gpu/gpu_test_util.h"
#include "worker/comm/device_communicator.h"

namespace tpserve {
namespace {

using ::tpserve::cuda::bf16;
using ::tpserve::gpu_test::VisibleCudaDevices;

using DeviceFloats = gpu_test::DeviceArray<float>;

// Rank r's i-th value in the all-reduce: small integers, so every partial sum is exact.
float AllReduceInput(int rank, int64_t i) { return static_cast<float>(i % 1000 + 7 * rank); }
// Rank r's i-th value in the bf16 all-reduce: every sum over up to 32 ranks stays below 256, so it
// is exact in bf16's 8 significant bits.
float AllReduceBf16Input(int rank, int64_t i) { return static_cast<float>(i % 4 + rank % 4); }
// Rank r's i-th value in the gather.
float GatherInput(int rank, int64_t i) { return static_cast<float>(rank * 100000 + i); }
// Uneven per-rank counts: rank r sends 3 + 5r floats (one rank of a world > 2 sends none).
std::vector<int64_t> GatherCounts(int world) {
  std::vector<int64_t> counts(world);
  for (int r = 0; r < world; ++r) counts[r] = (world > 2 && r == 1) ? 0 : 3 + 5 * r;
  return counts;
}

// The DeviceCommunicator side on one rank, on a stream of its own: the bf16 all-reduce, then the
// gather of GatherCounts(world) with rank 0 receiving in place (its part already at the front of
// `recv`, which is also its `send`). `mine` is this rank's part, `gathered` rank 0's result.
void RunDeviceSide(DeviceCommunicator& comm, int rank, int world, const std::vector<float>& mine,
                   const std::vector<float>& gathered) {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  constexpr int64_t kCount = 4096;
  std::vector<bf16> host(kCount);
  for (int64_t i = 0; i < kCount; ++i) host[i] = cuda::ToBf16(AllReduceBf16Input(rank, i));
  gpu_test::DeviceArray<bf16> data(kCount);
  data.Upload(host);
  ASSERT_TRUE(comm.EnqueueAllReduceSum(data.get(), kCount, stream).ok());
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<bf16> sum = data.Download();
  int64_t mismatches = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    float expected = 0;
    for (int r = 0; r < world; ++r) expected += AllReduceBf16Input(r, i);
    if (cuda::ToFloat(sum[i]) != expected && ++mismatches <= 5) {
      ADD_FAILURE() << "rank " << rank << " bf16 [" << i << "] = " << cuda::ToFloat(sum[i])
                    << ", expected " << expected;
    }
  }
  EXPECT_EQ(mismatches, 0) << "rank " << rank << " bf16";

  const std::vector<int64_t> counts = GatherCounts(world);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  DeviceFloats send(rank == 0 ? total : counts[rank]);
  send.Upload(mine);
  ASSERT_TRUE(comm.EnqueueGatherToRoot(send.get(), counts, send.get(), stream).ok());
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (rank == 0) {
    EXPECT_EQ(send.Download(), gathered);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// Runs the all-reduce of 1 and 1<<20 floats and the uneven gather on one rank, with EXPECTs,
// through the Communicator and then the DeviceCommunicator side.
void RunRank(int rank, int world, std::shared_ptr<gloo::rendezvous::Store> store) {
  auto comm = NcclCommunicator::Create(rank, world, /*device=*/rank, store, absl::Seconds(60));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->rank(), rank);
  EXPECT_EQ((*comm)->world_size(), world);
  EXPECT_NE((*comm)->stream(), nullptr);

  for (const int64_t count : {int64_t{1}, int64_t{1} << 20}) {
    std::vector<float> host(count);
    for (int64_t i = 0; i < count; ++i) host[i] = AllReduceInput(rank, i);
    DeviceFloats data(count);
    data.Upload(host);
    ASSERT_TRUE((*comm)->AllReduceSum(data.get(), count).ok());
    const std::vector<float> sum = data.Download();
    int64_t mismatches = 0;
    for (int64_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < world; ++r) expected += AllReduceInput(r, i);
      if (sum[i] != expected && ++mismatches <= 5) {
        ADD_FAILURE() << "rank " << rank << " count " << count << " [" << i << "] = " << sum[i]
                      << ", expected " << expected;
      }
    }
    EXPECT_EQ(mismatches, 0) << "rank " << rank << " count " << count;
  }

  const std::vector<int64_t> counts = GatherCounts(world);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<float> mine(counts[rank]);
  for (int64_t i = 0; i < counts[rank]; ++i) mine[i] = GatherInput(rank, i);
  DeviceFloats send(counts[rank]);
  send.Upload(mine);
  DeviceFloats recv(total);
  ASSERT_TRUE((*comm)->GatherToRoot(send.get(), counts, recv.get()).ok());
  std::vector<float> gathered;
  for (int r = 0; r < world; ++r) {
    for (int64_t i = 0; i < counts[r]; ++i) gathered.push_back(GatherInput(r, i));
  }
  if (rank == 0) {
    EXPECT_EQ(recv.Download(), gathered);
  }

  RunDeviceSide(**comm, rank, world, mine, gathered);
}

TEST(NcclCommunicatorTest, WorldOfOne) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  RunRank(0, 1, std::make_shared<gloo::rendezvous::HashStore>());
}

TEST(NcclCommunicatorTest, OneRankPerDevice) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(2);
  const int devices = VisibleCudaDevices();
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::thread> ranks;
  for (int r = 0; r < devices; ++r)
    ranks.emplace_back([r, devices, store] { RunRank(r, devices, store); });
  for (std::thread& t : ranks) t.join();
}

// A pipeline link: rank 1 (device 1) sends two bf16 buffers to rank 0 (device 0), which receives
// them in the order sent, as the stages of the CUDA model hand over the residual and the last MLP
// output; a peer outside the group or the rank itself is refused.
TEST(NcclCommunicatorTest, SendRecvCarriesBuffersInOrder) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(2);
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  constexpr int64_t kCount = 3 * 576;  // three rows of SmolLM2's hidden size
  auto value = [](int buffer, int64_t i) {
    return static_cast<float>((i % 200) - 100 + 0.5 * buffer);  // exact in bf16
  };
  auto run = [&](int rank) {
    auto comm = NcclCommunicator::Create(rank, 2, /*device=*/rank, store, absl::Seconds(60));
    ASSERT_TRUE(comm.ok()) << comm.status();
    EXPECT_EQ((*comm)->EnqueueSend(nullptr, 1, rank, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ((*comm)->EnqueueRecv(nullptr, 1, 2, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    gpu_test::DeviceArray<bf16> first(kCount), second(kCount);
    if (rank == 1) {
      std::vector<bf16> a(kCount), b(kCount);
      for (int64_t i = 0; i < kCount; ++i) {
        a[i] = cuda::ToBf16(value(0, i));
        b[i] = cuda::ToBf16(value(1, i));
      }
      first.Upload(a);
      second.Upload(b);
      ASSERT_TRUE((*comm)->EnqueueSend(first.get(), kCount, 0, stream).ok());
      ASSERT_TRUE((*comm)->EnqueueSend(second.get(), kCount, 0, stream).ok());
    } else {
      ASSERT_TRUE((*comm)->EnqueueRecv(first.get(), kCount, 1, stream).ok());
      ASSERT_TRUE((*comm)->EnqueueRecv(second.get(), kCount, 1, stream).ok());
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaStreamDestroy(stream));
    if (rank != 0) return;
    const std::vector<bf16> a = first.Download(), b = second.Download();
    int64_t mismatches = 0;
    for (int64_t i = 0; i < kCount; ++i) {
      if (cuda::ToFloat(a[i]) != value(0, i) || cuda::ToFloat(b[i]) != value(1, i)) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0);
  };
  std::thread receiver(run, 0), sender(run, 1);
  receiver.join();
  sender.join();
}

TEST(NcclCommunicatorTest, BadDeviceIsAnError) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  const int devices = VisibleCudaDevices();
  auto comm = NcclCommunicator::Create(
      0, 1, /*device=*/devices, std::make_shared<gloo::rendezvous::HashStore>(), absl::Seconds(1));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument) << comm.status();
}

TEST(NcclCommunicatorTest, MissingUniqueIdTimesOut) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  // Rank 1 of 2 waits for rank 0, which never comes.
  auto comm = NcclCommunicator::Create(
      1, 2, /*device=*/0, std::make_shared<gloo::rendezvous::HashStore>(), absl::Milliseconds(200));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
}

// The one test that runs on a machine without a GPU: Create fails with a Status, never aborts.
TEST(NcclCommunicatorTest, NoDeviceIsAStatus) {
  if (VisibleCudaDevices() > 0) GTEST_SKIP() << "a CUDA device is visible";
  auto comm = NcclCommunicator::Create(
      0, 1, /*device=*/0, std::make_shared<gloo::rendezvous::HashStore>(), absl::Seconds(1));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kFailedPrecondition) << comm.status();
  EXPECT_NE(comm.status().message().find("rank 0"), absl::string_view::npos) << comm.status();
  EXPECT_NE(comm.status().message().find("no CUDA device"), absl::string_view::npos)
      << comm.status();
}

}  // namespace
}  // namespace tpserve
