// cuBLASLt and NCCL are opened at run time (common/shared_library.h): here both load and answer
// through their tables, and where one cannot be loaded the code that needs it returns NOT_FOUND
// naming it instead of the process failing to start. No device is needed: the library is opened
// before any device is touched. Each missing-library case runs in a fresh process (a death test
// re-executed from the start), since a process opens each library once.
#include <gloo/rendezvous/hash_store.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cublaslt_library.h"
#include "kernels/cuda/gemm.h"
#include "worker/comm/nccl_communicator.h"
#include "worker/comm/nccl_library.h"

namespace tpserve {
namespace {

TEST(CudaLibrariesTest, CublasLtLoadsAndAnswers) {
  absl::StatusOr<const cuda::CublasLtLibrary*> lt = cuda::LoadCublasLt();
  ASSERT_TRUE(lt.ok()) << lt.status();
  const char* text = (*lt)->cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED);
  ASSERT_NE(text, nullptr);
  EXPECT_TRUE(absl::StrContains(absl::AsciiStrToLower(text), "not supported")) << text;
  EXPECT_EQ(*cuda::LoadCublasLt(), *lt);  // opened once
}

TEST(CudaLibrariesTest, NcclLoadsAndItsErrorsKeepTheirCodes) {
  absl::StatusOr<const NcclLibrary*> nccl = LoadNccl();
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  const absl::Status remote = NcclStatus(**nccl, ncclRemoteError, "all-reduce");
  EXPECT_EQ(remote.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(remote.message(), "all-reduce: ")) << remote;
  EXPECT_GT(remote.message().size(), std::string("all-reduce: ").size()) << remote;
  EXPECT_EQ(NcclStatus(**nccl, ncclInvalidUsage, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(NcclStatus(**nccl, ncclSuccess, "x").ok());
}

// Exits 0 when `status` is NOT_FOUND and names every one of `parts`; prints it and exits 1
// otherwise (the death test's child reports through its exit code).
void ExitByStatus(const absl::Status& status, std::initializer_list<const char*> parts) {
  bool named = status.code() == absl::StatusCode::kNotFound;
  for (const char* part : parts) named = named && absl::StrContains(status.message(), part);
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  std::exit(named ? 0 : 1);
}

TEST(CudaLibrariesDeathTest, GemmWithoutCublasLtNamesIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("TPSERVE_CUBLASLT_LIBRARY", "/nonexistent/libcublasLt.so.13", 1);
        ExitByStatus(cuda::Gemm::Create().status(),
                     {"cuBLASLt", "/nonexistent/libcublasLt.so.13", "TPSERVE_CUBLASLT_LIBRARY"});
      },
      testing::ExitedWithCode(0), "");
}

TEST(CudaLibrariesDeathTest, NcclCommunicatorWithoutNcclNamesIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("TPSERVE_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
        ExitByStatus(NcclCommunicator::Create(
                         0, 1, 0, std::make_shared<gloo::rendezvous::HashStore>(), absl::Seconds(5))
                         .status(),
                     {"NCCL rank 0", "/nonexistent/libnccl.so.2", "TPSERVE_NCCL_LIBRARY"});
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tpserve
