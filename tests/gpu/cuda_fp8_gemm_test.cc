// FP8 W8A8 on CUDA against the CPU reference of kernels/cpu/fp8_matmul.h (itself checked against
// ml_dtypes and NumPy by the fp8_matmul test):
//  - cuda::QuantizeRowsE4m3 gives cpu::QuantizeRowsE4m3's codes and scales bit for bit;
//  - Gemm::RunFp8, in the mode the device offers and in the epilogue mode, gives
//    cpu::MatmulE4m3BT's products within these bounds. Products of two E4M3 codes are exact in
//    fp32, so the two sides differ by (1) summation order, at most 3·k·u·Σ|a_code||b_code| times
//    both scales (u = 2^-24, as in cuda_gemm_test), and (2) the final rounding to bf16, 2^-8 of
//    the value. A wrong scale vector (per token and per channel swapped), a transposed operand or
//    a stale scale pointer misses by orders of magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cpu/fp8_matmul.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/fp8_quantize.h"
#include "kernels/cuda/gemm.h"
#include "tests/gpu/gpu_test_util.h"

namespace tpserve::cuda {
namespace {

constexpr double kBf16Rounding = 1.0 / 256;
constexpr double kFp32Rounding = 1.0 / (1 << 24);

// Normal values with a per-row spread of magnitudes (tokens and channels differ in range), rounded
// to bf16 and returned as the floats they equal; row 1 is zero when there are several rows.
std::vector<float> RandomRows(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> magnitude(-3.0f, 2.0f);
  std::vector<float> values(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = std::exp2(magnitude(rng));
    for (int64_t c = 0; c < cols; ++c) {
      values[r * cols + c] = rows > 1 && r == 1 ? 0.0f : ToFloat(ToBf16(normal(rng) * scale));
    }
  }
  return values;
}

using gpu_test::Download;
using gpu_test::Upload;

class CudaFp8GemmTest : public ::testing::Test {
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

  // Quantizes a [m, k] and b [n, k] on the device (checking the codes against the CPU's) and runs
  // the FP8 product in `mode`, checking it against cpu::MatmulE4m3BT.
  void Check(int64_t m, int64_t n, int64_t k, Fp8ScaleMode mode) {
    SCOPED_TRACE(absl::StrCat("m=", m, " n=", n, " k=", k,
                              mode == Fp8ScaleMode::kOuterVector ? " outer" : " epilogue"));
    const cudaStream_t stream = stream_->get();
    const std::vector<float> a = RandomRows(m, k, 1 + m + k);
    const std::vector<float> b = RandomRows(n, k, 2 + n + k);
    std::vector<uint8_t> a_codes(m * k), b_codes(n * k);
    std::vector<float> a_scales(m), b_scales(n), want(m * n);
    cpu::QuantizeRowsE4m3(a.data(), m, k, a_codes.data(), a_scales.data());
    cpu::QuantizeRowsE4m3(b.data(), n, k, b_codes.data(), b_scales.data());
    cpu::MatmulE4m3BT(a_codes.data(), a_scales.data(), b_codes.data(), b_scales.data(), m, n, k,
                      want.data());

    DeviceBuffer<bf16> a_dev = Upload(ToBf16(a), stream);
    DeviceBuffer<bf16> b_dev = Upload(ToBf16(b), stream);
    DeviceBuffer<uint8_t> a_codes_dev = Upload(std::vector<uint8_t>(m * k), stream);
    DeviceBuffer<uint8_t> b_codes_dev = Upload(std::vector<uint8_t>(n * k), stream);
    DeviceBuffer<float> a_scales_dev = Upload(std::vector<float>(m), stream);
    DeviceBuffer<float> b_scales_dev = Upload(std::vector<float>(n), stream);
    QuantizeRowsE4m3(a_dev.data(), m, k, a_codes_dev.data(), a_scales_dev.data(), stream);
    QuantizeRowsE4m3(b_dev.data(), n, k, b_codes_dev.data(), b_scales_dev.data(), stream);
    EXPECT_EQ(Download(a_codes_dev, stream), a_codes);
    EXPECT_EQ(Download(b_codes_dev, stream), b_codes);
    EXPECT_EQ(Download(a_scales_dev, stream), a_scales);
    EXPECT_EQ(Download(b_scales_dev, stream), b_scales);

    DeviceBuffer<bf16> c_dev = Upload(std::vector<bf16>(m * n), stream);
    DeviceBuffer<float> scratch = Upload(std::vector<float>(m * n), stream);
    Fp8GemmParams p;
    p.a = a_codes_dev.data();
    p.a_scales = a_scales_dev.data();
    p.b = b_codes_dev.data();
    p.b_scales = b_scales_dev.data();
    p.c = c_dev.data();
    p.m = m;
    p.n = n;
    p.k = k;
    p.scratch = scratch.data();
    const absl::Status run = gemm_->RunFp8(p, mode, stream);
    ASSERT_TRUE(run.ok()) << run;
    const std::vector<float> got = ToFloat(Download(c_dev, stream));
    ASSERT_TRUE(stream_->Synchronize().ok());

    int64_t failures = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double magnitude = 0.0;
        for (int64_t t = 0; t < k; ++t) {
          magnitude +=
              std::fabs(cpu::FromE4m3(a_codes[i * k + t]) * cpu::FromE4m3(b_codes[j * k + t]));
        }
        const double sum_bound =
            3.0 * (k + 1) * kFp32Rounding * magnitude * a_scales[i] * b_scales[j];
        const double w = want[i * n + j];
        const double bound = kBf16Rounding * (std::fabs(w) + sum_bound) + sum_bound;
        if (!(std::fabs(got[i * n + j] - w) <= bound) && ++failures <= 5) {
          ADD_FAILURE() << "c[" << i << ", " << j << "] = " << got[i * n + j] << ", CPU " << w
                        << ", bound " << bound;
        }
      }
    }
    EXPECT_EQ(failures, 0);
  }

  std::unique_ptr<Gemm> gemm_;
  std::unique_ptr<CudaStream> stream_;
};

// Decode and prefill shapes of a Llama-3-8B rank at TP 1 and 8, in the mode the device offers
// (logged by the model at load) and in the epilogue mode every FP8 device has.
TEST_F(CudaFp8GemmTest, ProductsMatchTheCpuReference) {
  absl::StatusOr<Fp8ScaleMode> mode = gemm_->ChooseFp8Mode(4096, 4096, 200);
  if (!mode.ok() && mode.status().code() == absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << mode.status();  // a GPU before sm_89
  }
  ASSERT_TRUE(mode.ok()) << mode.status();
  std::printf("FP8 scale mode on this device: %s\n",
              *mode == Fp8ScaleMode::kOuterVector ? "outer vector (cuBLASLt)" : "epilogue");
  for (const Fp8ScaleMode m : {*mode, Fp8ScaleMode::kEpilogue}) {
    Check(1, 4096, 4096, m);
    Check(8, 1792, 4096, m);
    Check(5, 4096, 512, m);
    Check(200, 768, 1024, m);
  }
}

TEST(CudaFp8GemmSupportedTest, RefusesWhatCublasLtFp8CannotTake) {
  alignas(256) static uint8_t codes[4096];
  alignas(256) static float scales[64];
  alignas(256) static bf16 out[4096];
  Fp8GemmParams p;
  p.a = codes;
  p.a_scales = scales;
  p.b = codes;
  p.b_scales = scales;
  p.c = out;
  p.m = 2;
  p.n = 16;
  p.k = 32;
  EXPECT_TRUE(Gemm::SupportedFp8(p, Fp8ScaleMode::kOuterVector).ok());
  EXPECT_EQ(Gemm::SupportedFp8(p, Fp8ScaleMode::kEpilogue).code(),
            absl::StatusCode::kInvalidArgument);  // no scratch
  Fp8GemmParams odd_k = p;
  odd_k.k = 40;
  const absl::Status status = Gemm::SupportedFp8(odd_k, Fp8ScaleMode::kOuterVector);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("multiple of 16"), std::string::npos) << status;
  Fp8GemmParams misaligned = p;
  misaligned.a = codes + 8;
  EXPECT_EQ(Gemm::SupportedFp8(misaligned, Fp8ScaleMode::kOuterVector).code(),
            absl::StatusCode::kInvalidArgument);
  Fp8GemmParams no_scales = p;
  no_scales.b_scales = nullptr;
  EXPECT_EQ(Gemm::SupportedFp8(no_scales, Fp8ScaleMode::kOuterVector).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tpserve::cuda
