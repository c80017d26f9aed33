// The CUDA elementwise and row ops (kernels/cuda/) against their CPU ops (kernels/cpu/,
// model/dequantize.h) on random inputs, plus the device-memory and stream owners. Compiled by the
// host compiler; the kernels run through their launchers.
//
// Inputs are rounded to bf16 first and the CPU op gets the same values as fp32, so a difference
// comes only from the GPU's bf16 outputs (and fp32 vs double statistics, ~1e-6). Tolerances, in
// normalized error ||gpu - cpu|| / ||cpu|| (tests/gpu/gpu_test_util.h):
//   - copies (embedding, KV write) and the GGUF decode: exact, bit for bit;
//   - one bf16 rounding of an fp32 result (RMSNorm, the residual of AddRmsNorm, RoPE, SiLU*mul):
//     round-to-nearest-even moves each element by at most 2^-9 = 1.95e-3 of its magnitude, so
//     the normalized error is at most 1.95e-3 plus the fp32 noise; we allow kOneRounding = 3e-3.
//   - AddRmsNorm's output: the GPU normalizes the residual it stored (rounded to bf16), the CPU
//     the exact fp32 sum. The rounded residual moves each element by <= 2^-9 and the row's rms by
//     <= 2^-9, then the output is rounded again: <= 3 * 2^-9 = 5.9e-3; we allow kTwoRoundings =
//     6e-3. (Against cpu::RmsNorm of the GPU's own residual it is one rounding again, checked
//     with kOneRounding.)
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "kernels/cpu/add_bias.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/silu_mul.h"
#include "kernels/cuda/add_bias.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/dequantize.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/qkv_rope_kv_write.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/silu_mul.h"
#include "kernels/cuda/write_kv_cache.h"
#include "model/dequantize.h"
#include "model/ggml_type.h"
#include "tests/gpu/gpu_test_util.h"

namespace tpserve::cuda {
namespace {

using ::tpserve::gpu_test::NormalizedError;

constexpr double kOneRounding = 3e-3;
constexpr double kTwoRoundings = 6e-3;

// The value of a StatusOr that must hold one: a test without working device memory or streams
// cannot go on, so a failure ends the process with the status.
template <typename T>
T OrDie(absl::StatusOr<T> value, const char* what) {
  if (!value.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, value.status().ToString().c_str());
    std::abort();
  }
  return *std::move(value);
}

// n values uniform in [-scale, scale], rounded to bf16 (kept as float, exactly representable).
std::vector<float> RandomBf16Values(int64_t n, float scale, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = ToFloat(ToBf16(dist(rng)));
  return v;
}

uint16_t Bits(bf16 x) {
  uint16_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

// Holds the test's stream; skips the test (SetUp) where no CUDA device is visible.
class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TP_SKIP_WITHOUT_CUDA_DEVICES(1);
    stream_.emplace(OrDie(CudaStream::Create(), "CudaStream::Create"));
  }

  cudaStream_t stream() const { return stream_->get(); }

  template <typename T>
  DeviceBuffer<T> Upload(const std::vector<T>& host) {
    DeviceBuffer<T> buffer = OrDie(DeviceBuffer<T>::Allocate(host.size()), "Allocate");
    const absl::Status status = buffer.CopyFromHost(absl::MakeConstSpan(host), stream());
    EXPECT_TRUE(status.ok()) << status;
    return buffer;
  }
  DeviceBuffer<bf16> UploadBf16(const std::vector<float>& values) { return Upload(ToBf16(values)); }

  // The whole buffer, after the work queued on the stream so far.
  template <typename T>
  std::vector<T> Download(const DeviceBuffer<T>& buffer) {
    std::vector<T> host(buffer.size());
    const absl::Status status = buffer.CopyToHost(absl::MakeSpan(host), stream());
    EXPECT_TRUE(status.ok()) << status;
    return host;
  }
  std::vector<float> DownloadFloats(const DeviceBuffer<bf16>& buffer) {
    return ToFloat(Download(buffer));
  }

  std::mt19937_64 rng_{20260131};

 private:
  std::optional<CudaStream> stream_;
};

// ---------------------------------------------------------------------------------------------
// Owners: DeviceBuffer, CudaStream, CudaEvent.

TEST(DeviceBufferTest, ArgumentErrorsNeedNoDevice) {
  absl::StatusOr<DeviceBuffer<float>> negative = DeviceBuffer<float>::Allocate(-1);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument) << negative.status();
  absl::StatusOr<DeviceBuffer<float>> empty = DeviceBuffer<float>::Allocate(0);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(empty->data(), nullptr);
  const std::vector<float> two(2);
  EXPECT_EQ(empty->CopyFromHost(two).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> out(2);
  EXPECT_EQ(empty->CopyToHost(absl::MakeSpan(out)).code(), absl::StatusCode::kInvalidArgument);
}

// The one check that runs without a GPU: no device is a Status, never a crash.
TEST(DeviceBufferTest, NoDeviceIsAStatus) {
  if (::tpserve::gpu_test::VisibleCudaDevices() > 0) GTEST_SKIP() << "a CUDA device is visible";
  absl::StatusOr<DeviceBuffer<bf16>> buffer = DeviceBuffer<bf16>::Allocate(16);
  ASSERT_FALSE(buffer.ok());
  EXPECT_EQ(buffer.status().code(), absl::StatusCode::kFailedPrecondition) << buffer.status();
  absl::StatusOr<CudaStream> stream = CudaStream::Create();
  EXPECT_FALSE(stream.ok());
  absl::StatusOr<CudaEvent> event = CudaEvent::Create();
  EXPECT_FALSE(event.ok());
}

TEST_F(CudaOpsTest, DeviceBufferRoundTripAndMove) {
  std::vector<int32_t> host(1000);
  std::iota(host.begin(), host.end(), -7);
  DeviceBuffer<int32_t> a = Upload(host);
  EXPECT_EQ(a.size(), 1000);
  EXPECT_EQ(a.bytes(), 4000);
  DeviceBuffer<int32_t> b = std::move(a);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(Download(b), host);
  DeviceBuffer<int32_t> c = OrDie(DeviceBuffer<int32_t>::Allocate(3), "Allocate");
  c = std::move(b);  // frees c's old allocation
  EXPECT_EQ(Download(c), host);
  std::vector<int32_t> prefix(10);
  ASSERT_TRUE(c.CopyToHost(absl::MakeSpan(prefix), stream()).ok());
  EXPECT_EQ(prefix, std::vector<int32_t>(host.begin(), host.begin() + 10));
}

TEST_F(CudaOpsTest, EventOrdersTwoStreams) {
  CudaStream other = OrDie(CudaStream::Create(), "CudaStream::Create");
  CudaEvent done = OrDie(CudaEvent::Create(), "CudaEvent::Create");
  const std::vector<float> host(1 << 20, 2.5f);
  DeviceBuffer<float> source = Upload(host);
  DeviceBuffer<float> copy = OrDie(DeviceBuffer<float>::Allocate(host.size()), "Allocate");
  ASSERT_TRUE(cudaMemcpyAsync(copy.data(), source.data(), copy.bytes(), cudaMemcpyDeviceToDevice,
                              stream()) == cudaSuccess);
  ASSERT_TRUE(done.Record(stream()).ok());
  ASSERT_TRUE(other.Wait(done).ok());
  std::vector<float> back(host.size());
  ASSERT_TRUE(copy.CopyToHost(absl::MakeSpan(back), other.get()).ok());
  EXPECT_EQ(back, host);
  absl::StatusOr<bool> finished = done.IsDone();
  ASSERT_TRUE(finished.ok()) << finished.status();
  EXPECT_TRUE(*finished);
}

// ---------------------------------------------------------------------------------------------
// Embedding

TEST_F(CudaOpsTest, EmbeddingCopiesRowsExactly) {
  const int64_t vocab = 37;
  for (const int64_t hidden : {1, 7, 64, 576, 4100}) {
    for (const int64_t n : {1, 13}) {
      const std::vector<float> table = RandomBf16Values(vocab * hidden, 2.0f, rng_);
      std::vector<int32_t> ids(n);
      std::uniform_int_distribution<int32_t> id(0, vocab - 1);
      for (int32_t& x : ids) x = id(rng_);
      ids.front() = 0;
      ids.back() = vocab - 1;
      DeviceBuffer<bf16> table_d = UploadBf16(table);
      DeviceBuffer<int32_t> ids_d = Upload(ids);
      DeviceBuffer<bf16> out_d = OrDie(DeviceBuffer<bf16>::Allocate(n * hidden), "Allocate");
      Embedding(table_d.data(), vocab, hidden, ids_d.data(), n, out_d.data(), stream());
      std::vector<float> want(n * hidden);
      cpu::Embedding(table.data(), vocab, hidden, ids.data(), n, want.data());
      EXPECT_EQ(DownloadFloats(out_d), want) << "hidden " << hidden << " n " << n;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

constexpr int64_t kNormDims[] = {1, 7, 64, 576, 1000, 4096, 8200};
constexpr float kEps = 1e-5f;

TEST_F(CudaOpsTest, RmsNormMatchesCpu) {
  for (const int64_t dim : kNormDims) {
    for (const int64_t rows : {1, 5}) {
      const std::vector<float> x = RandomBf16Values(rows * dim, 3.0f, rng_);
      const std::vector<float> weight = RandomBf16Values(dim, 1.5f, rng_);
      DeviceBuffer<bf16> x_d = UploadBf16(x);
      DeviceBuffer<bf16> weight_d = UploadBf16(weight);
      DeviceBuffer<bf16> out_d = OrDie(DeviceBuffer<bf16>::Allocate(rows * dim), "Allocate");
      RmsNorm(x_d.data(), weight_d.data(), rows, dim, kEps, out_d.data(), stream());
      std::vector<float> want(rows * dim);
      cpu::RmsNorm(x.data(), weight.data(), rows, dim, kEps, want.data());
      const std::vector<float> got = DownloadFloats(out_d);
      EXPECT_LE(NormalizedError(got, want), kOneRounding) << "dim " << dim << " rows " << rows;

      // In place gives the same bits.
      RmsNorm(x_d.data(), weight_d.data(), rows, dim, kEps, x_d.data(), stream());
      EXPECT_EQ(DownloadFloats(x_d), got) << "in place, dim " << dim << " rows " << rows;
    }
  }
}

TEST_F(CudaOpsTest, AddRmsNormMatchesCpu) {
  for (const int64_t dim : kNormDims) {
    const int64_t rows = 3;
    // A residual stream larger than the update, as in a deep model.
    const std::vector<float> residual = RandomBf16Values(rows * dim, 8.0f, rng_);
    const std::vector<float> x = RandomBf16Values(rows * dim, 1.0f, rng_);
    const std::vector<float> weight = RandomBf16Values(dim, 1.5f, rng_);
    DeviceBuffer<bf16> residual_d = UploadBf16(residual);
    DeviceBuffer<bf16> x_d = UploadBf16(x);
    DeviceBuffer<bf16> weight_d = UploadBf16(weight);
    DeviceBuffer<bf16> out_d = OrDie(DeviceBuffer<bf16>::Allocate(rows * dim), "Allocate");
    AddRmsNorm(residual_d.data(), x_d.data(), weight_d.data(), rows, dim, kEps, out_d.data(),
               stream());

    std::vector<float> want_residual = residual;
    std::vector<float> want(rows * dim);
    cpu::AddRmsNorm(want_residual.data(), x.data(), weight.data(), rows, dim, kEps, want.data());
    const std::vector<float> got_residual = DownloadFloats(residual_d);
    const std::vector<float> got = DownloadFloats(out_d);
    EXPECT_LE(NormalizedError(got_residual, want_residual), kOneRounding) << "dim " << dim;
    EXPECT_LE(NormalizedError(got, want), kTwoRoundings) << "dim " << dim;
    // The output is the norm of the stored (rounded) residual.
    std::vector<float> norm_of_stored(rows * dim);
    cpu::RmsNorm(got_residual.data(), weight.data(), rows, dim, kEps, norm_of_stored.data());
    EXPECT_LE(NormalizedError(got, norm_of_stored), kOneRounding) << "dim " << dim;

    // out == x (the layer's output buffer reused) gives the same bits.
    DeviceBuffer<bf16> residual2_d = UploadBf16(residual);
    AddRmsNorm(residual2_d.data(), x_d.data(), weight_d.data(), rows, dim, kEps, x_d.data(),
               stream());
    EXPECT_EQ(DownloadFloats(x_d), got) << "out aliasing x, dim " << dim;
    EXPECT_EQ(DownloadFloats(residual2_d), got_residual) << "out aliasing x, dim " << dim;
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE

struct RopeCase {
  int64_t num_tokens, num_heads, head_dim, rope_dims;
  double theta;
  int32_t max_position;
  bool scaled = false;  // every other pair's frequency divided by 8, as llama3 scaling's low ones
};

TEST_F(CudaOpsTest, RopeMatchesCpuInBothLayouts) {
  const RopeCase cases[] = {
      {1, 9, 64, 64, 10000.0f, 10},              // SmolLM2-135M, one decode token
      {7, 3, 64, 32, 10000.0f, 2048},            // partial rotary
      {5, 2, 6, 6, 10000.0f, 100},               // tiny head
      {4, 3, 9, 8, 500000.0f, 1000},             // odd head_dim, one dim passed through
      {3, 32, 128, 128, 500000.0f, 131071},      // Llama 3, long context
      {33, 4, 128, 128, 10000.0f, 4096},         // a prefill chunk
      {9, 8, 128, 128, 500000.0f, 65536, true},  // a scaled table (Llama 3.1)
  };
  for (const RopeCase& c : cases) {
    for (const RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
      const int64_t n = c.num_tokens * c.num_heads * c.head_dim;
      const std::vector<float> x = RandomBf16Values(n, 2.0f, rng_);
      std::vector<int32_t> positions(c.num_tokens);
      std::uniform_int_distribution<int32_t> position(0, c.max_position);
      for (int32_t& p : positions) p = position(rng_);
      positions.back() = c.max_position;
      DeviceBuffer<bf16> x_d = UploadBf16(x);
      DeviceBuffer<int32_t> positions_d = Upload(positions);
      std::vector<double> inv_freq(c.rope_dims / 2);
      for (int64_t i = 0; i < c.rope_dims / 2; ++i) {
        inv_freq[i] = std::pow(c.theta, -2.0 * i / c.rope_dims) / (c.scaled && i % 2 ? 8.0 : 1.0);
      }
      DeviceBuffer<double> inv_freq_d = Upload(inv_freq);
      ApplyRope(x_d.data(), positions_d.data(), c.num_tokens, c.num_heads, c.head_dim, c.rope_dims,
                inv_freq_d.data(), style, stream());
      std::vector<float> want = x;
      cpu::ApplyRope(want.data(), positions.data(), c.num_tokens, c.num_heads, c.head_dim,
                     c.rope_dims, inv_freq.data(), style);
      const std::vector<float> got = DownloadFloats(x_d);
      const bool adjacent = style == RopeStyle::kAdjacentPairs;
      EXPECT_LE(NormalizedError(got, want), kOneRounding)
          << "tokens " << c.num_tokens << " heads " << c.num_heads << " head_dim " << c.head_dim
          << " rope_dims " << c.rope_dims << (adjacent ? " adjacent" : " rotate-half");
      // Dims past rope_dims are not touched at all.
      for (int64_t row = 0; row < c.num_tokens * c.num_heads; ++row) {
        for (int64_t d = c.rope_dims; d < c.head_dim; ++d) {
          ASSERT_EQ(got[row * c.head_dim + d], x[row * c.head_dim + d]) << "row " << row;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// SiLU * up

TEST_F(CudaOpsTest, SiluMulMatchesCpu) {
  for (const int64_t n : {1, 7, 8, 1000, 5 * 1536 + 3, 1 << 20}) {
    // Gates out to +-12: saturated on both sides as well as the curved middle.
    const std::vector<float> gate = RandomBf16Values(n, 12.0f, rng_);
    const std::vector<float> up = RandomBf16Values(n, 2.0f, rng_);
    DeviceBuffer<bf16> gate_d = UploadBf16(gate);
    DeviceBuffer<bf16> up_d = UploadBf16(up);
    DeviceBuffer<bf16> out_d = OrDie(DeviceBuffer<bf16>::Allocate(n), "Allocate");
    SiluMul(gate_d.data(), up_d.data(), n, out_d.data(), stream());
    std::vector<float> want(n);
    cpu::SiluMul(gate.data(), up.data(), n, want.data());
    const std::vector<float> got = DownloadFloats(out_d);
    EXPECT_LE(NormalizedError(got, want), kOneRounding) << "n " << n;

    // In place over gate gives the same bits.
    SiluMul(gate_d.data(), up_d.data(), n, gate_d.data(), stream());
    EXPECT_EQ(DownloadFloats(gate_d), got) << "in place, n " << n;
  }
}

// The stacked form the model runs (one gate_up product) gives SiluMul's bits on the two halves,
// vectorised (widths of whole packs) and not.
TEST_F(CudaOpsTest, SiluMulRowsEqualsSiluMulOnTheHalves) {
  for (const int64_t width : {1536, 7}) {
    const int64_t rows = 5;
    const std::vector<float> gate_up = RandomBf16Values(rows * 2 * width, 12.0f, rng_);
    std::vector<float> gate, up;
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = gate_up.begin() + r * 2 * width;
      gate.insert(gate.end(), row, row + width);
      up.insert(up.end(), row + width, row + 2 * width);
    }
    DeviceBuffer<bf16> gate_up_d = UploadBf16(gate_up);
    DeviceBuffer<bf16> gate_d = UploadBf16(gate);
    DeviceBuffer<bf16> up_d = UploadBf16(up);
    DeviceBuffer<bf16> rows_out = OrDie(DeviceBuffer<bf16>::Allocate(rows * width), "Allocate");
    DeviceBuffer<bf16> flat_out = OrDie(DeviceBuffer<bf16>::Allocate(rows * width), "Allocate");
    SiluMulRows(gate_up_d.data(), rows, width, rows_out.data(), stream());
    SiluMul(gate_d.data(), up_d.data(), rows * width, flat_out.data(), stream());
    EXPECT_EQ(DownloadFloats(rows_out), DownloadFloats(flat_out)) << "width " << width;
  }
}

// The fused split + RoPE + KV write gives, bit for bit, what the separate ops give: the columns
// copied apart, ApplyRope on q and on k, WriteKvCache (or WriteKvCacheFp8) of k and v. Both pair
// layouts, partial rotary dims, a padding token (slot -1) and both pool formats.
TEST_F(CudaOpsTest, SplitQkvRopeWriteKvEqualsTheSeparateOps) {
  struct Case {
    int64_t q_heads, kv_heads, head_dim, rope_dims;
    bool fp8;
  };
  const int64_t num_tokens = 6, num_slots = 48;
  for (const Case c : {Case{9, 3, 64, 64, false}, Case{8, 2, 128, 64, false},
                       Case{9, 3, 64, 64, true}, Case{4, 4, 128, 128, true}}) {
    for (const RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
      const int64_t q_width = c.q_heads * c.head_dim, kv_width = c.kv_heads * c.head_dim;
      const int64_t width = q_width + 2 * kv_width;
      const std::vector<float> qkv = RandomBf16Values(num_tokens * width, 3.0f, rng_);
      std::vector<int32_t> positions = {0, 5, 17, 1000, 4095, 131071};
      std::vector<int64_t> slots = {3, 40, 7, -1, 0, 22};
      std::vector<double> inv_freq(c.rope_dims / 2);
      for (int64_t i = 0; i < c.rope_dims / 2; ++i) {
        inv_freq[i] = std::pow(500000.0, -2.0 * i / c.rope_dims);
      }
      std::vector<float> q(num_tokens * q_width), k(num_tokens * kv_width),
          v(num_tokens * kv_width);
      for (int64_t t = 0; t < num_tokens; ++t) {
        const auto row = qkv.begin() + t * width;
        std::copy(row, row + q_width, q.begin() + t * q_width);
        std::copy(row + q_width, row + q_width + kv_width, k.begin() + t * kv_width);
        std::copy(row + q_width + kv_width, row + width, v.begin() + t * kv_width);
      }
      DeviceBuffer<bf16> qkv_d = UploadBf16(qkv);
      DeviceBuffer<bf16> q_d = UploadBf16(q);
      DeviceBuffer<bf16> k_d = UploadBf16(k);
      DeviceBuffer<bf16> v_d = UploadBf16(v);
      DeviceBuffer<int32_t> positions_d = Upload(positions);
      DeviceBuffer<int64_t> slots_d = Upload(slots);
      DeviceBuffer<double> inv_freq_d = Upload(inv_freq);
      DeviceBuffer<bf16> q_fused = OrDie(DeviceBuffer<bf16>::Allocate(q.size()), "Allocate");
      const int64_t pool = num_slots * kv_width * (c.fp8 ? 1 : 2);
      DeviceBuffer<uint8_t> k_sep = Upload(std::vector<uint8_t>(pool, 0x5A));
      DeviceBuffer<uint8_t> v_sep = Upload(std::vector<uint8_t>(pool, 0x5A));
      DeviceBuffer<uint8_t> k_fused = Upload(std::vector<uint8_t>(pool, 0x5A));
      DeviceBuffer<uint8_t> v_fused = Upload(std::vector<uint8_t>(pool, 0x5A));
      const float scale = 0.3f;

      ApplyRope(q_d.data(), positions_d.data(), num_tokens, c.q_heads, c.head_dim, c.rope_dims,
                inv_freq_d.data(), style, stream());
      ApplyRope(k_d.data(), positions_d.data(), num_tokens, c.kv_heads, c.head_dim, c.rope_dims,
                inv_freq_d.data(), style, stream());
      QkvRopeParams p;
      if (c.fp8) {
        WriteKvCacheFp8(k_d.data(), v_d.data(), slots_d.data(), num_tokens, c.kv_heads, c.head_dim,
                        scale, k_sep.data(), v_sep.data(), stream());
        p.k_cache_fp8 = k_fused.data();
        p.v_cache_fp8 = v_fused.data();
        p.kv_scale = scale;
      } else {
        WriteKvCache(k_d.data(), v_d.data(), slots_d.data(), num_tokens, c.kv_heads, c.head_dim,
                     reinterpret_cast<bf16*>(k_sep.data()), reinterpret_cast<bf16*>(v_sep.data()),
                     stream());
        p.k_cache = reinterpret_cast<bf16*>(k_fused.data());
        p.v_cache = reinterpret_cast<bf16*>(v_fused.data());
      }
      p.qkv = qkv_d.data();
      p.positions = positions_d.data();
      p.slot_mapping = slots_d.data();
      p.inv_freq = inv_freq_d.data();
      p.q = q_fused.data();
      p.num_tokens = num_tokens;
      p.num_q_heads = c.q_heads;
      p.num_kv_heads = c.kv_heads;
      p.head_dim = c.head_dim;
      p.rope_dims = c.rope_dims;
      p.style = style;
      SplitQkvRopeWriteKv(p, stream());
      const std::string what =
          absl::StrCat("heads ", c.q_heads, "/", c.kv_heads, " head_dim ", c.head_dim,
                       " rope_dims ", c.rope_dims, c.fp8 ? " fp8" : " bf16",
                       style == RopeStyle::kRotateHalf ? " rotate-half" : "");
      EXPECT_EQ(DownloadFloats(q_fused), DownloadFloats(q_d)) << what;
      EXPECT_EQ(Download(k_fused), Download(k_sep)) << what;
      EXPECT_EQ(Download(v_fused), Download(v_sep)) << what;
    }
  }
}

TEST_F(CudaOpsTest, SiluMulOnUnalignedPointers) {
  // n % 8 == 0 but the pointers are 2 bytes past a 16-byte boundary: the one-element path.
  const int64_t n = 1024;
  const std::vector<float> gate = RandomBf16Values(n + 1, 6.0f, rng_);
  const std::vector<float> up = RandomBf16Values(n + 1, 2.0f, rng_);
  DeviceBuffer<bf16> gate_d = UploadBf16(gate);
  DeviceBuffer<bf16> up_d = UploadBf16(up);
  DeviceBuffer<bf16> out_d = OrDie(DeviceBuffer<bf16>::Allocate(n + 1), "Allocate");
  SiluMul(gate_d.data() + 1, up_d.data() + 1, n, out_d.data() + 1, stream());
  std::vector<float> want(n);
  cpu::SiluMul(gate.data() + 1, up.data() + 1, n, want.data());
  const std::vector<float> got = DownloadFloats(out_d);
  EXPECT_LE(NormalizedError(std::vector<float>(got.begin() + 1, got.end()), want), kOneRounding);
}

// ---------------------------------------------------------------------------------------------
// Bias

TEST_F(CudaOpsTest, AddBiasMatchesCpu) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 64}, {17, 1152}, {3, 7}};
  for (const auto& [rows, width] : shapes) {
    const std::vector<float> x = RandomBf16Values(rows * width, 2.0f, rng_);
    const std::vector<float> bias = RandomBf16Values(width, 4.0f, rng_);
    DeviceBuffer<bf16> x_d = UploadBf16(x);
    DeviceBuffer<float> bias_d = Upload(bias);
    AddBias(x_d.data(), bias_d.data(), rows, width, stream());
    std::vector<float> want = x;
    cpu::AddBias(want.data(), bias.data(), rows, width);
    EXPECT_LE(NormalizedError(DownloadFloats(x_d), want), kOneRounding)
        << "rows " << rows << " width " << width;
  }
}

// ---------------------------------------------------------------------------------------------
// KV cache write

TEST_F(CudaOpsTest, WriteKvCacheMatchesCpu) {
  const int64_t num_blocks = 6, block_size = 16, num_slots = num_blocks * block_size;
  struct Shape {
    int64_t num_kv_heads, head_dim;
  };
  for (const Shape s : {Shape{1, 64}, Shape{3, 64}, Shape{2, 7}, Shape{8, 128}}) {
    const int64_t row = s.num_kv_heads * s.head_dim;
    const int64_t num_tokens = 11;
    // Distinct slots anywhere in the pool; two padding tokens (negative slots) are skipped.
    std::vector<int64_t> all_slots(num_slots);
    std::iota(all_slots.begin(), all_slots.end(), 0);
    std::shuffle(all_slots.begin(), all_slots.end(), rng_);
    std::vector<int64_t> slots(all_slots.begin(), all_slots.begin() + num_tokens);
    slots[3] = -1;
    slots[num_tokens - 1] = -1;
    const std::vector<float> k = RandomBf16Values(num_tokens * row, 1.0f, rng_);
    const std::vector<float> v = RandomBf16Values(num_tokens * row, 1.0f, rng_);
    std::vector<float> k_cache = RandomBf16Values(num_slots * row, 1.0f, rng_);
    std::vector<float> v_cache = RandomBf16Values(num_slots * row, 1.0f, rng_);

    DeviceBuffer<bf16> k_d = UploadBf16(k);
    DeviceBuffer<bf16> v_d = UploadBf16(v);
    DeviceBuffer<int64_t> slots_d = Upload(slots);
    DeviceBuffer<bf16> k_cache_d = UploadBf16(k_cache);
    DeviceBuffer<bf16> v_cache_d = UploadBf16(v_cache);
    WriteKvCache(k_d.data(), v_d.data(), slots_d.data(), num_tokens, s.num_kv_heads, s.head_dim,
                 k_cache_d.data(), v_cache_d.data(), stream());
    cpu::WriteKvCache(k.data(), v.data(), slots.data(), num_tokens, s.num_kv_heads, s.head_dim,
                      k_cache.data(), v_cache.data());
    EXPECT_EQ(DownloadFloats(k_cache_d), k_cache) << "kv_heads " << s.num_kv_heads;
    EXPECT_EQ(DownloadFloats(v_cache_d), v_cache) << "kv_heads " << s.num_kv_heads;
  }
}

// The FP8 pool's codes equal cpu::QuantizeE4m3's bit for bit (the reference checked against
// ml_dtypes by the fp8_e4m3 test): values past the saturation point, E4M3 subnormals, ties
// between neighbouring codes, zeros of both signs and a NaN, at two scales.
TEST_F(CudaOpsTest, WriteKvCacheFp8MatchesCpuCodes) {
  const int64_t num_kv_heads = 2, head_dim = 64, row = num_kv_heads * head_dim;
  const int64_t num_tokens = 9, num_slots = 40;
  std::vector<int64_t> slots(num_slots);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng_);
  slots.resize(num_tokens);
  slots[4] = -1;  // padding: skipped
  for (const float scale : {1.0f, 0.37f}) {
    std::vector<float> k = RandomBf16Values(num_tokens * row, 600.0f * scale, rng_);
    std::vector<float> v = RandomBf16Values(num_tokens * row, 0.02f * scale, rng_);  // subnormals
    // Exact midpoints between E4M3 neighbours (bf16 holds them): 1.0625 between 1 and 1.125,
    // 0.01171875 between the subnormals 0.0117 and 0.0137 (the tie goes to the even code).
    const float specials[] = {1.0625f, -1.0625f, 1.1875f, 0.01171875f, 0.0f,         -0.0f,
                              448.0f,  464.0f,   -480.0f, 1e30f,       std::nanf("")};
    for (size_t i = 0; i < std::size(specials); ++i) {
      k[i] = ToFloat(ToBf16(specials[i] * scale));
      v[row + i] = ToFloat(ToBf16(specials[i] * scale));
    }
    std::vector<uint8_t> k_want(num_slots * row, 0xAB), v_want(num_slots * row, 0xAB);
    for (int64_t t = 0; t < num_tokens; ++t) {
      if (slots[t] < 0) continue;
      cpu::QuantizeE4m3(k.data() + t * row, row, scale, k_want.data() + slots[t] * row);
      cpu::QuantizeE4m3(v.data() + t * row, row, scale, v_want.data() + slots[t] * row);
    }
    DeviceBuffer<bf16> k_d = UploadBf16(k);
    DeviceBuffer<bf16> v_d = UploadBf16(v);
    DeviceBuffer<int64_t> slots_d = Upload(slots);
    DeviceBuffer<uint8_t> k_cache_d = Upload(std::vector<uint8_t>(num_slots * row, 0xAB));
    DeviceBuffer<uint8_t> v_cache_d = Upload(std::vector<uint8_t>(num_slots * row, 0xAB));
    WriteKvCacheFp8(k_d.data(), v_d.data(), slots_d.data(), num_tokens, num_kv_heads, head_dim,
                    scale, k_cache_d.data(), v_cache_d.data(), stream());
    EXPECT_EQ(Download(k_cache_d), k_want) << "scale " << scale;
    EXPECT_EQ(Download(v_cache_d), v_want) << "scale " << scale;
  }
}

// ---------------------------------------------------------------------------------------------
// GGUF decode

static_assert(static_cast<uint32_t>(WeightFormat::kF32) == static_cast<uint32_t>(GgmlType::kF32));
static_assert(static_cast<uint32_t>(WeightFormat::kF16) == static_cast<uint32_t>(GgmlType::kF16));
static_assert(static_cast<uint32_t>(WeightFormat::kBF16) == static_cast<uint32_t>(GgmlType::kBF16));
static_assert(static_cast<uint32_t>(WeightFormat::kQ4_0) == static_cast<uint32_t>(GgmlType::kQ4_0));
static_assert(static_cast<uint32_t>(WeightFormat::kQ4_1) == static_cast<uint32_t>(GgmlType::kQ4_1));
static_assert(static_cast<uint32_t>(WeightFormat::kQ8_0) == static_cast<uint32_t>(GgmlType::kQ8_0));

constexpr WeightFormat kFormats[] = {WeightFormat::kF32,  WeightFormat::kF16,  WeightFormat::kBF16,
                                     WeightFormat::kQ4_0, WeightFormat::kQ4_1, WeightFormat::kQ8_0,
                                     WeightFormat::kQ4_K, WeightFormat::kQ5_K, WeightFormat::kQ6_K};

// Host-only: the block sizes agree with the GGUF reader's, and the types the CPU loader refuses
// have no device format.
TEST(DequantizeToBf16Test, FormatsAgreeWithGgmlTypes) {
  for (const WeightFormat format : kFormats) {
    const uint32_t type = static_cast<uint32_t>(format);
    const std::optional<GgmlTypeTraits> traits = GetGgmlTypeTraits(type);
    ASSERT_TRUE(traits.has_value()) << type;
    EXPECT_EQ(BlockElements(format), traits->block_elements) << traits->name;
    EXPECT_EQ(BlockBytes(format), traits->block_bytes) << traits->name;
    EXPECT_EQ(WeightFormatOfGgmlType(type), format);
  }
  for (const uint32_t refused : {10u, 11u, 15u}) {  // Q2_K, Q3_K, Q8_K
    EXPECT_EQ(WeightFormatOfGgmlType(refused), std::nullopt) << refused;
  }
}

// A finite fp16 bit pattern: any sign and mantissa, exponent 0..30 (zeros and subnormals
// included, infinities and NaNs not: a NaN weight compares unequal to itself).
uint16_t RandomFiniteFp16(std::mt19937_64& rng) {
  const uint16_t sign = static_cast<uint16_t>(rng() & 1) << 15;
  const uint16_t exponent = static_cast<uint16_t>(rng() % 31) << 10;
  return sign | exponent | static_cast<uint16_t>(rng() & 0x3FF);
}

void AppendU16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v & 0xFF));
  out.push_back(static_cast<uint8_t>(v >> 8));
}

// Random GGUF data for `num_elements` of `format`: every fp16 field finite, quants uniform.
std::vector<uint8_t> RandomBlocks(WeightFormat format, int64_t num_elements, std::mt19937_64& rng) {
  std::vector<uint8_t> out;
  const int64_t blocks = num_elements / BlockElements(format);
  for (int64_t b = 0; b < blocks; ++b) {
    switch (format) {
      case WeightFormat::kF32: {
        // Any non-NaN float: exponent 0..254 (subnormals, zeros, the full range), or infinity.
        uint32_t bits = static_cast<uint32_t>(rng());
        if (((bits >> 23) & 0xFF) == 0xFF) bits &= 0xFF800000u;  // NaN -> infinity
        for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(bits >> (8 * i)));
        break;
      }
      case WeightFormat::kF16:
        AppendU16(out, RandomFiniteFp16(rng));
        break;
      case WeightFormat::kBF16:
        AppendU16(out, static_cast<uint16_t>(rng()));  // any pattern: the bits are copied
        break;
      case WeightFormat::kQ4_1:
        AppendU16(out, RandomFiniteFp16(rng));  // d
        AppendU16(out, RandomFiniteFp16(rng));  // m
        for (int i = 0; i < 16; ++i) out.push_back(static_cast<uint8_t>(rng()));
        break;
      case WeightFormat::kQ4_0:
        AppendU16(out, RandomFiniteFp16(rng));
        for (int i = 0; i < 16; ++i) out.push_back(static_cast<uint8_t>(rng()));
        break;
      case WeightFormat::kQ8_0:
        AppendU16(out, RandomFiniteFp16(rng));
        for (int i = 0; i < 32; ++i) out.push_back(static_cast<uint8_t>(rng()));
        break;
      case WeightFormat::kQ4_K:
      case WeightFormat::kQ5_K:
        AppendU16(out, RandomFiniteFp16(rng));  // d
        AppendU16(out, RandomFiniteFp16(rng));  // dmin
        // Scales and mins (every 6-bit pattern), fifth bits, quants.
        for (int i = 0; i < (format == WeightFormat::kQ4_K ? 140 : 172); ++i) {
          out.push_back(static_cast<uint8_t>(rng()));
        }
        break;
      case WeightFormat::kQ6_K:
        for (int i = 0; i < 208; ++i) out.push_back(static_cast<uint8_t>(rng()));
        AppendU16(out, RandomFiniteFp16(rng));  // d
        break;
    }
  }
  return out;
}

TEST_F(CudaOpsTest, DequantizeToBf16IsTheCpuDecodeRoundedOnce) {
  for (const WeightFormat format : kFormats) {
    const int64_t block = BlockElements(format);
    for (const int64_t blocks : {1, 7, 1001, 4097}) {
      const int64_t n = blocks * block;
      const std::vector<uint8_t> raw = RandomBlocks(format, n, rng_);
      ASSERT_EQ(static_cast<int64_t>(raw.size()), blocks * BlockBytes(format));
      // Uploaded at an odd offset: GGUF blocks carry no alignment, the decoder must not need any.
      std::vector<uint8_t> shifted(raw.size() + 1);
      std::copy(raw.begin(), raw.end(), shifted.begin() + 1);
      DeviceBuffer<uint8_t> raw_d = Upload(shifted);
      DeviceBuffer<bf16> out_d = OrDie(DeviceBuffer<bf16>::Allocate(n), "Allocate");
      DequantizeToBf16(format, raw_d.data() + 1, n, out_d.data(), stream());
      const std::vector<bf16> got = Download(out_d);

      std::vector<float> decoded(n);
      const absl::Status status =
          Dequantize(static_cast<GgmlType>(format), raw, absl::MakeSpan(decoded));
      ASSERT_TRUE(status.ok()) << status;
      int64_t mismatches = 0;
      for (int64_t i = 0; i < n; ++i) {
        // BF16 is copied bit for bit (NaN payloads too); the rest is the CPU value, rounded once.
        uint16_t want;
        if (format == WeightFormat::kBF16) {
          want = static_cast<uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
        } else {
          want = Bits(ToBf16(decoded[i]));
        }
        if (Bits(got[i]) != want && ++mismatches <= 5) {
          ADD_FAILURE() << "format " << static_cast<uint32_t>(format) << " n " << n << " [" << i
                        << "]: got 0x" << std::hex << Bits(got[i]) << ", want 0x" << want
                        << std::dec << " (fp32 " << decoded[i] << ")";
        }
      }
      EXPECT_EQ(mismatches, 0) << "format " << static_cast<uint32_t>(format) << " n " << n;
    }
  }
}

}  // namespace
}  // namespace tpserve::cuda
