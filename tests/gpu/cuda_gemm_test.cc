// cuda::Gemm (cuBLASLt, bf16 in, fp32 accumulation) against cpu::MatmulBT (OpenBLAS, fp32) on
// inputs that are exactly representable in bf16, so both sides multiply the same numbers.
//
// Tolerance. The two results differ only by
//  (1) summation order: a length-k fp32 dot product summed in any order (split-K included) is
//      within k·u·Σ|a||b| of the exact one, u = 2^-24 (the classic γ_k bound). The CPU rounds to
//      nearest; the tensor cores may truncate inside an MMA (relative error up to 2u a step), so
//      together at most 3·k·u·Σ|a||b| (k + 1 with accumulate), `sum_bound` below;
//  (2) the GPU's final rounding to bf16 (8 significant bits, to nearest): at most 2^-8 of the
//      value it rounds.
// So every element must satisfy |gpu - cpu| <= 2^-8·(|cpu| + sum_bound) + sum_bound. Accumulating
// into bf16, cuBLASLt rounds a·bᵀ to bf16 before adding c (gemm.h), a second rounding of at most
// 2^-8·|a·bᵀ|, which the bound then adds. For bf16
// output the normalized error ||gpu - cpu|| / ||cpu|| must also stay below 2^-8: (2) alone reaches
// that only if every element rounds by its worst case (uniform rounding errors give about a third
// of it), and (1) is orders of magnitude smaller on random data. A wrong layout, a transposed
// operand or a stale plan misses both by orders of magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "tests/gpu/gpu_test_util.h"

namespace tpserve::cuda {
namespace {

constexpr double kBf16Rounding = 1.0 / 256;  // 2^-8
constexpr double kFp32Rounding = 1.0 / (1 << 24);

// Uniform in [-1, 1), rounded to bf16 and returned as the float it equals exactly.
std::vector<float> RandomBf16Values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = ToFloat(ToBf16(uniform(rng)));
  return values;
}

template <typename T>
DeviceBuffer<T> Upload(const std::vector<T>& host, cudaStream_t stream) {
  absl::StatusOr<DeviceBuffer<T>> buffer = DeviceBuffer<T>::Allocate(host.size());
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_TRUE(buffer->CopyFromHost(host, stream).ok());
  return *std::move(buffer);
}

template <typename T>
std::vector<T> Download(const DeviceBuffer<T>& buffer, int64_t count, cudaStream_t stream) {
  std::vector<T> host(count);
  const absl::Status status = buffer.CopyToHost(absl::MakeSpan(host), stream);
  EXPECT_TRUE(status.ok()) << status;
  return host;
}

struct Shape {
  int64_t m, n, k;
};

std::string Name(const Shape& s) { return absl::StrCat("m=", s.m, " n=", s.n, " k=", s.k); }

class CudaGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TP_SKIP_WITHOUT_CUDA_DEVICES(1);
    absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create();
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    gemm_ = *std::move(gemm);
    absl::StatusOr<CudaStream> stream = CudaStream::Create();
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = std::make_unique<CudaStream>(*std::move(stream));
  }

  // Runs one product on the GPU (bf16 or fp32 output, optionally accumulating onto `initial`)
  // and checks it against the CPU with the bounds in the file comment.
  void Check(const Shape& s, bool fp32_out, bool accumulate = false) {
    SCOPED_TRACE(absl::StrCat(Name(s), fp32_out ? " fp32 out" : " bf16 out",
                              accumulate ? " accumulate" : ""));
    const cudaStream_t stream = stream_->get();
    const std::vector<float> a = RandomBf16Values(s.m * s.k, 1 + s.m * 7 + s.k);
    const std::vector<float> b = RandomBf16Values(s.n * s.k, 2 + s.n * 5 + s.k);
    const std::vector<float> initial = RandomBf16Values(s.m * s.n, 3 + s.n);
    std::vector<float> want = accumulate ? initial : std::vector<float>(s.m * s.n);
    cpu::MatmulBT(a.data(), b.data(), s.m, s.n, s.k, want.data(), accumulate);

    DeviceBuffer<bf16> a_dev = Upload(ToBf16(a), stream);
    DeviceBuffer<bf16> b_dev = Upload(ToBf16(b), stream);
    std::vector<float> got;
    if (fp32_out) {
      DeviceBuffer<float> c_dev = Upload(initial, stream);
      const absl::Status status = gemm_->MatmulBT(a_dev.data(), b_dev.data(), s.m, s.n, s.k,
                                                  c_dev.data(), stream, accumulate);
      ASSERT_TRUE(status.ok()) << status;
      got = Download(c_dev, s.m * s.n, stream);
    } else {
      DeviceBuffer<bf16> c_dev = Upload(ToBf16(initial), stream);
      const absl::Status status = gemm_->MatmulBT(a_dev.data(), b_dev.data(), s.m, s.n, s.k,
                                                  c_dev.data(), stream, accumulate);
      ASSERT_TRUE(status.ok()) << status;
      got = ToFloat(Download(c_dev, s.m * s.n, stream));
    }
    ASSERT_TRUE(stream_->Synchronize().ok());

    const double rounding = fp32_out ? kFp32Rounding : kBf16Rounding;
    int64_t failures = 0;
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double magnitude = accumulate ? std::fabs(initial[i * s.n + j]) : 0.0;
        for (int64_t p = 0; p < s.k; ++p) magnitude += std::fabs(a[i * s.k + p] * b[j * s.k + p]);
        const double sum_bound = 3.0 * (s.k + 1) * kFp32Rounding * magnitude;
        const double w = want[i * s.n + j];
        const double product = accumulate ? std::fabs(w - initial[i * s.n + j]) : 0.0;
        const double product_rounding =
            accumulate && !fp32_out ? rounding * (product + sum_bound) : 0.0;
        const double bound = rounding * (std::fabs(w) + sum_bound) + sum_bound + product_rounding;
        if (!(std::fabs(got[i * s.n + j] - w) <= bound) && ++failures <= 5) {
          ADD_FAILURE() << "c[" << i << ", " << j << "] = " << got[i * s.n + j] << ", CPU " << w
                        << ", bound " << bound;
        }
      }
    }
    EXPECT_EQ(failures, 0);
    if (!fp32_out) {
      EXPECT_LE(gpu_test::NormalizedError(got, want), kBf16Rounding);
    }
  }

  std::unique_ptr<Gemm> gemm_;
  std::unique_ptr<CudaStream> stream_;
};

// Decode: one to eight tokens against a weight, the GEMV-like shapes of every decode step.
TEST_F(CudaGemmTest, GemvShapesMatchCpu) {
  for (int64_t m = 1; m <= 8; ++m) Check({m, 1024, 4096}, /*fp32_out=*/false);
  Check({1, 4096, 4096}, /*fp32_out=*/false);
  Check({8, 4096, 4096}, /*fp32_out=*/false);
}

// Sizes that are not multiples of 8 (rows not 16-byte aligned) take cuBLASLt's slower kernels.
TEST_F(CudaGemmTest, OddShapesMatchCpu) {
  for (const Shape& s : std::vector<Shape>{
           {1, 7, 5}, {3, 1000, 777}, {7, 33, 1}, {13, 4099, 129}, {65, 127, 4095}, {5, 1, 64}}) {
    Check(s, /*fp32_out=*/false);
  }
}

TEST_F(CudaGemmTest, PrefillShapeMatchesCpu) { Check({128, 2048, 1024}, /*fp32_out=*/false); }

// fp32 output (e.g. logits): no final rounding, so only the summation-order bound remains.
TEST_F(CudaGemmTest, Fp32OutputMatchesCpu) {
  Check({1, 4096, 1024}, /*fp32_out=*/true);
  Check({6, 999, 333}, /*fp32_out=*/true);
}

TEST_F(CudaGemmTest, AccumulateAddsToOutput) {
  Check({4, 512, 256}, /*fp32_out=*/false, /*accumulate=*/true);
  Check({3, 257, 100}, /*fp32_out=*/true, /*accumulate=*/true);
}

// An operand one element past a 256-byte boundary (a row view into a larger buffer) is 2-byte
// aligned: the plan for it must not reuse kernels that assume 16-byte loads.
TEST_F(CudaGemmTest, ElementAlignedOperandsWork) {
  const cudaStream_t stream = stream_->get();
  const Shape s{2, 64, 64};
  const std::vector<float> a = RandomBf16Values(s.m * s.k + 1, 11);
  const std::vector<float> b = RandomBf16Values(s.n * s.k, 12);
  DeviceBuffer<bf16> a_dev = Upload(ToBf16(a), stream);
  DeviceBuffer<bf16> b_dev = Upload(ToBf16(b), stream);
  absl::StatusOr<DeviceBuffer<bf16>> c_dev = DeviceBuffer<bf16>::Allocate(s.m * s.n);
  ASSERT_TRUE(c_dev.ok());
  ASSERT_TRUE(
      gemm_->MatmulBT(a_dev.data() + 1, b_dev.data(), s.m, s.n, s.k, c_dev->data(), stream).ok());
  std::vector<float> want(s.m * s.n);
  cpu::MatmulBT(a.data() + 1, b.data(), s.m, s.n, s.k, want.data());
  const std::vector<float> got = ToFloat(Download(*c_dev, s.m * s.n, stream));
  EXPECT_LE(gpu_test::NormalizedError(got, want), kBf16Rounding);
}

TEST_F(CudaGemmTest, PlansAreCachedPerShape) {
  const cudaStream_t stream = stream_->get();
  absl::StatusOr<DeviceBuffer<bf16>> a = DeviceBuffer<bf16>::Allocate(64 * 256);
  absl::StatusOr<DeviceBuffer<bf16>> b = DeviceBuffer<bf16>::Allocate(256 * 256);
  absl::StatusOr<DeviceBuffer<bf16>> c = DeviceBuffer<bf16>::Allocate(64 * 256);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const size_t before = gemm_->cached_plans();
  const size_t tuned_before = gemm_->tuned_plans();
  for (int repeat = 0; repeat < 3; ++repeat) {
    ASSERT_TRUE(gemm_->MatmulBT(a->data(), b->data(), 8, 256, 256, c->data(), stream).ok());
  }
  EXPECT_EQ(gemm_->cached_plans(), before + 1);
  // A decode-sized shape is timed once, at its first call (when the heuristic offers more than
  // one algorithm), never again.
  const size_t tuned = gemm_->tuned_plans();
  EXPECT_LE(tuned, tuned_before + 1);
  std::printf("m=8 256x256: %s\n", tuned > tuned_before ? "algorithms timed" : "one candidate");
  ASSERT_TRUE(gemm_->MatmulBT(a->data(), b->data(), 4, 256, 256, c->data(), stream).ok());
  EXPECT_EQ(gemm_->cached_plans(), before + 2);
  // Above kTunedMaxM rows the heuristic's first choice is kept.
  const size_t tuned_small = gemm_->tuned_plans();
  ASSERT_TRUE(gemm_->MatmulBT(a->data(), b->data(), 64, 256, 256, c->data(), stream).ok());
  EXPECT_EQ(gemm_->tuned_plans(), tuned_small);
  EXPECT_TRUE(stream_->Synchronize().ok());
}

TEST_F(CudaGemmTest, ZeroSizes) {
  const cudaStream_t stream = stream_->get();
  DeviceBuffer<bf16> c = Upload(ToBf16(std::vector<float>(6, 3.0f)), stream);
  // m == 0 and n == 0 touch nothing, even with null operands.
  EXPECT_TRUE(gemm_->MatmulBT(nullptr, nullptr, 0, 3, 4, c.data(), stream).ok());
  EXPECT_TRUE(gemm_->MatmulBT(nullptr, nullptr, 2, 0, 4, c.data(), stream).ok());
  // k == 0 is an empty sum: accumulating leaves c alone, otherwise c becomes 0.
  ASSERT_TRUE(gemm_->MatmulBT(nullptr, nullptr, 2, 3, 0, c.data(), stream, true).ok());
  EXPECT_EQ(ToFloat(Download(c, 6, stream)), std::vector<float>(6, 3.0f));
  ASSERT_TRUE(gemm_->MatmulBT(nullptr, nullptr, 2, 3, 0, c.data(), stream).ok());
  EXPECT_EQ(ToFloat(Download(c, 6, stream)), std::vector<float>(6, 0.0f));
}

// Supported reads no device memory, so this runs without a GPU too.
TEST(CudaGemmSupportedTest, RefusesBadParameters) {
  alignas(256) static bf16 storage[64];
  GemmParams p{storage, storage, storage, GemmOutputType::kBf16, 2, 2, 2, false};
  EXPECT_TRUE(Gemm::Supported(p).ok());

  GemmParams negative = p;
  negative.k = -1;
  EXPECT_EQ(Gemm::Supported(negative).code(), absl::StatusCode::kInvalidArgument);

  GemmParams null_operand = p;
  null_operand.b = nullptr;
  EXPECT_EQ(Gemm::Supported(null_operand).code(), absl::StatusCode::kInvalidArgument);

  GemmParams odd_address = p;
  odd_address.a = reinterpret_cast<const bf16*>(reinterpret_cast<const char*>(storage) + 1);
  const absl::Status status = Gemm::Supported(odd_address);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("aligned"), absl::string_view::npos) << status;

  GemmParams fp32_at_two_bytes = p;
  fp32_at_two_bytes.c = storage + 1;
  fp32_at_two_bytes.c_type = GemmOutputType::kFloat32;
  EXPECT_EQ(Gemm::Supported(fp32_at_two_bytes).code(), absl::StatusCode::kInvalidArgument);
}

// The one test that runs without a GPU: Create fails with a Status, never aborts.
TEST(CudaGemmNoDeviceTest, CreateIsAStatus) {
  if (gpu_test::VisibleCudaDevices() > 0) GTEST_SKIP() << "a CUDA device is visible";
  absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create();
  ASSERT_FALSE(gemm.ok());
  EXPECT_EQ(gemm.status().code(), absl::StatusCode::kFailedPrecondition) << gemm.status();
}

}  // namespace
}  // namespace tpserve::cuda
