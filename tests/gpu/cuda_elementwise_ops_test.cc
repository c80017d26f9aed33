// The CUDA elementwise and row ops (kernels/cuda/) against their CPU ops (kernels/cpu/,
// model/dequantize.h) on random inputs, plus the device-memory and stream owners. Compiled by the
// host compiler; the kernels run through their launchers.
//
// Inputs are rounded to bf16 first and the CPU op gets the same values as fp32, so a difference
// comes only from the GPU's bf16 outputs (and fp32 vs double statistics, ~1e-6). Tolerances, in
// normalized error ||gpu - cpu|| / ||cpu|| (tests/gpu/gpu_test_util.h):
//   - copies (embedding, the V write) and the GGUF decode: exact, bit for bit; FP8 codes of the
//     same values too;
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
#include "kernels/cpu/gelu_tanh_mul.h"
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
#include "kernels/cuda/silu_mul.h"
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

// Qwen3's and Gemma 3's q/k norms: each q and k head of the fused rows as its own RMSNorm row; v
// untouched.
TEST_F(CudaOpsTest, QkHeadRmsNormMatchesCpuPerHead) {
  const int64_t tokens = 5, q_heads = 4, kv_heads = 2, head_dim = 128;
  const int64_t width = (q_heads + 2 * kv_heads) * head_dim;
  const std::vector<float> qkv = RandomBf16Values(tokens * width, 3.0f, rng_);
  const std::vector<float> q_weight = RandomBf16Values(head_dim, 1.5f, rng_);
  const std::vector<float> k_weight = RandomBf16Values(head_dim, 1.5f, rng_);
  DeviceBuffer<bf16> qkv_d = UploadBf16(qkv);
  DeviceBuffer<bf16> q_weight_d = UploadBf16(q_weight);
  DeviceBuffer<bf16> k_weight_d = UploadBf16(k_weight);
  QkHeadRmsNorm(qkv_d.data(), q_weight_d.data(), k_weight_d.data(), tokens, q_heads, kv_heads,
                head_dim, kEps, stream());
  std::vector<float> want = qkv;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < q_heads + kv_heads; ++h) {
      float* row = want.data() + t * width + h * head_dim;
      cpu::RmsNorm(row, (h < q_heads ? q_weight : k_weight).data(), 1, head_dim, kEps, row);
    }
  }
  const std::vector<float> got = DownloadFloats(qkv_d);
  EXPECT_LE(NormalizedError(got, want), kOneRounding);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = (q_heads + kv_heads) * head_dim; e < width; ++e) {
      ASSERT_EQ(got[t * width + e], qkv[t * width + e]) << "v of token " << t;
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
// After the QKV product: split, RoPE and the KV write in one kernel (SplitQkvRopeWriteKv)

// One token's row of the fused product is [q heads | k heads | v heads]; these cut a row-major
// [tokens, width] array into its three parts.
std::vector<float> Columns(const std::vector<float>& rows, int64_t width, int64_t first,
                           int64_t count) {
  std::vector<float> out;
  for (size_t r = 0; r * width < rows.size(); ++r) {
    out.insert(out.end(), rows.begin() + r * width + first,
               rows.begin() + r * width + first + count);
  }
  return out;
}

// A bf16 pool's bytes as the floats they hold.
std::vector<float> Bf16PoolValues(const std::vector<uint8_t>& bytes) {
  std::vector<bf16> values(bytes.size() / sizeof(bf16));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return ToFloat(values);
}

struct SplitCase {
  int64_t num_tokens, q_heads, kv_heads, head_dim, rope_dims;
  RopeStyle style = RopeStyle::kAdjacentPairs;
  bool fp8 = false;
  std::vector<float> k_scales = {}, v_scales = {};  // [kv_heads], with fp8
};

struct SplitResult {
  std::vector<float> q;
  std::vector<uint8_t> k_pool, v_pool;  // bf16 or E4M3 bytes
};

// The inverse frequencies of base `theta` over rope_dims (every other one divided by 8 when
// `scaled`, as llama3 scaling does to its low frequencies).
std::vector<double> InvFreq(int64_t rope_dims, double theta, bool scaled = false) {
  std::vector<double> inv_freq(rope_dims / 2);
  for (int64_t i = 0; i < rope_dims / 2; ++i) {
    inv_freq[i] = std::pow(theta, -2.0 * i / rope_dims) / (scaled && i % 2 ? 8.0 : 1.0);
  }
  return inv_freq;
}

class SplitQkvTest : public CudaOpsTest {
 protected:
  // Runs the kernel over `qkv` into a pool of `num_slots` slots whose bytes start as `pool`.
  SplitResult Run(const SplitCase& c, const std::vector<float>& qkv,
                  const std::vector<int32_t>& positions, const std::vector<int64_t>& slots,
                  const std::vector<double>& inv_freq, const std::vector<uint8_t>& pool) {
    DeviceBuffer<bf16> qkv_d = UploadBf16(qkv);
    DeviceBuffer<int32_t> positions_d = Upload(positions);
    DeviceBuffer<int64_t> slots_d = Upload(slots);
    DeviceBuffer<double> inv_freq_d = Upload(inv_freq);
    DeviceBuffer<bf16> q_d =
        OrDie(DeviceBuffer<bf16>::Allocate(c.num_tokens * c.q_heads * c.head_dim), "Allocate");
    DeviceBuffer<uint8_t> k_pool = Upload(pool);
    DeviceBuffer<uint8_t> v_pool = Upload(pool);
    DeviceBuffer<float> k_scales = Upload(c.k_scales);
    DeviceBuffer<float> v_scales = Upload(c.v_scales);
    QkvRopeParams p;
    if (c.fp8) {
      p.k_cache_fp8 = k_pool.data();
      p.v_cache_fp8 = v_pool.data();
      p.k_scales = k_scales.data();
      p.v_scales = v_scales.data();
    } else {
      p.k_cache = reinterpret_cast<bf16*>(k_pool.data());
      p.v_cache = reinterpret_cast<bf16*>(v_pool.data());
    }
    p.qkv = qkv_d.data();
    p.positions = positions_d.data();
    p.slot_mapping = slots_d.data();
    p.inv_freq = inv_freq_d.data();
    p.q = q_d.data();
    p.num_tokens = c.num_tokens;
    p.num_q_heads = c.q_heads;
    p.num_kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.rope_dims = c.rope_dims;
    p.style = c.style;
    SplitQkvRopeWriteKv(p, stream());
    return {DownloadFloats(q_d), Download(k_pool), Download(v_pool)};
  }
};

struct RopeCase {
  int64_t num_tokens, num_heads, head_dim, rope_dims;
  double theta;
  int32_t max_position;
  bool scaled = false;  // every other pair's frequency divided by 8, as llama3 scaling's low ones
};

// q and k rotated as cpu::ApplyRope rotates them, in both pair layouts (one bf16 rounding; the
// dims past rope_dims copied exactly), v copied exactly; the pool holds token t in slot t.
TEST_F(SplitQkvTest, RotatesQAndKAsTheCpu) {
  const RopeCase cases[] = {
      {1, 9, 64, 64, 10000.0f, 10},              // SmolLM2-135M, one decode token
      {7, 3, 64, 32, 10000.0f, 2048},            // partial rotary
      {5, 2, 6, 6, 10000.0f, 100},               // tiny head
      {4, 3, 9, 8, 500000.0f, 1000},             // odd head_dim, one dim passed through
      {3, 32, 128, 128, 500000.0f, 131071},      // Llama 3, long context
      {33, 4, 128, 128, 10000.0f, 4096},         // a prefill chunk
      {9, 8, 128, 128, 500000.0f, 65536, true},  // a scaled table (Llama 3.1)
  };
  for (const RopeCase& r : cases) {
    for (const RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kRotateHalf}) {
      const SplitCase c{r.num_tokens, r.num_heads, 1, r.head_dim, r.rope_dims, style};
      const int64_t q_width = c.q_heads * c.head_dim, width = q_width + 2 * c.head_dim;
      const std::vector<float> qkv = RandomBf16Values(c.num_tokens * width, 2.0f, rng_);
      std::vector<int32_t> positions(c.num_tokens);
      std::uniform_int_distribution<int32_t> position(0, r.max_position);
      for (int32_t& p : positions) p = position(rng_);
      positions.back() = r.max_position;
      std::vector<int64_t> slots(c.num_tokens);
      std::iota(slots.begin(), slots.end(), 0);
      const std::vector<double> inv_freq = InvFreq(c.rope_dims, r.theta, r.scaled);
      const SplitResult got =
          Run(c, qkv, positions, slots, inv_freq,
              std::vector<uint8_t>(c.num_tokens * c.head_dim * sizeof(bf16), 0));

      std::vector<float> q = Columns(qkv, width, 0, q_width);
      std::vector<float> k = Columns(qkv, width, q_width, c.head_dim);
      const std::vector<float> v = Columns(qkv, width, q_width + c.head_dim, c.head_dim);
      const std::vector<float> q_in = q;
      cpu::ApplyRope(q.data(), positions.data(), c.num_tokens, c.q_heads, c.head_dim, c.rope_dims,
                     inv_freq.data(), style);
      cpu::ApplyRope(k.data(), positions.data(), c.num_tokens, 1, c.head_dim, c.rope_dims,
                     inv_freq.data(), style);
      const std::string what = absl::StrCat(
          "tokens ", c.num_tokens, " heads ", c.q_heads, " head_dim ", c.head_dim, " rope_dims ",
          c.rope_dims, style == RopeStyle::kAdjacentPairs ? " adjacent" : " rotate-half");
      EXPECT_LE(NormalizedError(got.q, q), kOneRounding) << what;
      EXPECT_LE(NormalizedError(Bf16PoolValues(got.k_pool), k), kOneRounding) << what;
      EXPECT_EQ(Bf16PoolValues(got.v_pool), v) << what;
      for (int64_t row = 0; row < c.num_tokens * c.q_heads; ++row) {
        for (int64_t d = c.rope_dims; d < c.head_dim; ++d) {
          ASSERT_EQ(got.q[row * c.head_dim + d], q_in[row * c.head_dim + d]) << what;
        }
      }
    }
  }
}

// K and V go to their tokens' slots and nowhere else: a padding token (slot -1) writes nothing,
// other slots keep their bytes. V is copied exactly (cpu::WriteKvCache's pool), K rotated.
TEST_F(SplitQkvTest, WritesEachTokenToItsSlotOnly) {
  const int64_t num_slots = 96;
  for (const auto& [kv_heads, head_dim] :
       {std::pair<int64_t, int64_t>{1, 64}, {3, 64}, {2, 8}, {8, 128}}) {
    const SplitCase c{11, 2 * kv_heads, kv_heads, head_dim, head_dim};
    const int64_t kv_width = kv_heads * head_dim, q_width = c.q_heads * head_dim;
    const int64_t width = q_width + 2 * kv_width;
    std::vector<int64_t> slots(num_slots);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng_);
    slots.resize(c.num_tokens);
    slots[3] = -1;
    slots[c.num_tokens - 1] = -1;
    const std::vector<float> qkv = RandomBf16Values(c.num_tokens * width, 1.0f, rng_);
    const std::vector<int32_t> positions(c.num_tokens, 7);
    const std::vector<double> inv_freq = InvFreq(head_dim, 10000.0);
    const std::vector<float> before = RandomBf16Values(num_slots * kv_width, 1.0f, rng_);
    const std::vector<bf16> before_bf16 = ToBf16(before);
    std::vector<uint8_t> pool(before_bf16.size() * sizeof(bf16));
    std::memcpy(pool.data(), before_bf16.data(), pool.size());
    const SplitResult got = Run(c, qkv, positions, slots, inv_freq, pool);

    std::vector<float> k = Columns(qkv, width, q_width, kv_width);
    const std::vector<float> v = Columns(qkv, width, q_width + kv_width, kv_width);
    cpu::ApplyRope(k.data(), positions.data(), c.num_tokens, kv_heads, head_dim, head_dim,
                   inv_freq.data(), c.style);
    std::vector<float> k_want = before, v_want = before;
    cpu::WriteKvCache(k.data(), v.data(), slots.data(), c.num_tokens, kv_heads, head_dim,
                      k_want.data(), v_want.data());
    const std::string what = absl::StrCat("kv_heads ", kv_heads, " head_dim ", head_dim);
    EXPECT_EQ(Bf16PoolValues(got.v_pool), v_want) << what;
    const std::vector<float> k_got = Bf16PoolValues(got.k_pool);
    EXPECT_LE(NormalizedError(k_got, k_want), kOneRounding) << what;
    for (int64_t slot = 0; slot < num_slots; ++slot) {
      if (std::find(slots.begin(), slots.end(), slot) != slots.end()) continue;
      for (int64_t e = 0; e < kv_width; ++e) {
        ASSERT_EQ(k_got[slot * kv_width + e], before[slot * kv_width + e]) << what;
      }
    }
  }
}

// An FP8 pool: V's codes are cpu::WriteKvCacheFp8's, bit for bit (its E4M3 checked against
// ml_dtypes by the fp8_e4m3 test): E4M3 subnormals, values past the saturation point, zeros of
// both signs, a NaN and, at scale 1, exact ties between neighbouring codes (1.0625 between 1 and
// 1.125, 0.01171875 between two subnormals: the even code wins). K is the E4M3 of its rotation:
// within E4M3's rounding (at most 1/16 of each value, about 2.7% RMS) of the CPU's rotation. Each
// KV head has its own K and V scale. Untouched slots keep their bytes.
TEST_F(SplitQkvTest, Fp8PoolHoldsTheCpusCodes) {
  const int64_t num_slots = 40;
  for (const float scale : {1.0f, 0.37f}) {
    SplitCase c{9, 4, 2, 64, 64, RopeStyle::kRotateHalf, /*fp8=*/true};
    // K (up to ~424 * scale once rotated) stays under 448 codes in both heads: its check measures
    // rounding, not saturation. The specials are in V's head 0, at `scale`.
    c.k_scales = {1.5f * scale, 1.0f * scale};
    c.v_scales = {scale, 3.0f * scale};
    const int64_t kv_width = c.kv_heads * c.head_dim, q_width = c.q_heads * c.head_dim;
    const int64_t width = q_width + 2 * kv_width;
    std::vector<int64_t> slots(num_slots);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng_);
    slots.resize(c.num_tokens);
    slots[4] = -1;
    std::vector<float> qkv = RandomBf16Values(c.num_tokens * width, 300.0f * scale, rng_);
    std::uniform_real_distribution<float> small(-0.02f * scale, 0.02f * scale);
    for (int64_t t = 0; t < c.num_tokens; ++t) {  // V: subnormal codes
      for (int64_t e = 0; e < kv_width; ++e) {
        qkv[t * width + q_width + kv_width + e] = ToFloat(ToBf16(small(rng_)));
      }
    }
    std::vector<float> specials = {0.0f, -0.0f, 448.0f, 464.0f, -480.0f, 1e30f, std::nanf("")};
    if (scale == 1.0f) specials.insert(specials.end(), {1.0625f, -1.0625f, 1.1875f, 0.01171875f});
    for (size_t i = 0; i < specials.size(); ++i) {
      qkv[width + q_width + kv_width + i] = ToFloat(ToBf16(specials[i] * scale));  // token 1's V
    }
    const std::vector<int32_t> positions = {0, 1, 2, 3, 500, 501, 4095, 9, 77};
    const std::vector<double> inv_freq = InvFreq(c.head_dim, 500000.0);
    const SplitResult got =
        Run(c, qkv, positions, slots, inv_freq, std::vector<uint8_t>(num_slots * kv_width, 0xAB));

    std::vector<float> k = Columns(qkv, width, q_width, kv_width);
    const std::vector<float> v = Columns(qkv, width, q_width + kv_width, kv_width);
    cpu::ApplyRope(k.data(), positions.data(), c.num_tokens, c.kv_heads, c.head_dim, c.rope_dims,
                   inv_freq.data(), c.style);
    std::vector<uint8_t> k_codes(num_slots * kv_width, 0xAB), v_want(num_slots * kv_width, 0xAB);
    cpu::WriteKvCacheFp8(k.data(), v.data(), slots.data(), c.num_tokens, c.kv_heads, c.head_dim,
                         c.k_scales.data(), c.v_scales.data(), k_codes.data(), v_want.data());
    std::vector<float> k_got, k_want;
    for (int64_t t = 0; t < c.num_tokens; ++t) {
      if (slots[t] < 0) continue;
      for (int64_t e = 0; e < kv_width; ++e) {
        k_got.push_back(cpu::FromE4m3(got.k_pool[slots[t] * kv_width + e]) *
                        c.k_scales[e / c.head_dim]);
        k_want.push_back(k[t * kv_width + e]);
      }
    }
    EXPECT_EQ(got.v_pool, v_want) << "scale " << scale;
    EXPECT_LE(NormalizedError(k_got, k_want), 0.045) << "scale " << scale;
    for (int64_t slot = 0; slot < num_slots; ++slot) {
      if (std::find(slots.begin(), slots.end(), slot) != slots.end()) continue;
      for (int64_t e = 0; e < kv_width; ++e) {
        ASSERT_EQ(got.k_pool[slot * kv_width + e], 0xAB) << "scale " << scale;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// SiLU * up, over the gate_up product's rows

TEST_F(CudaOpsTest, SiluMulRowsMatchesCpu) {
  for (const auto& [rows, width] :
       {std::pair<int64_t, int64_t>{1, 1536}, {5, 1536}, {3, 7}, {1, 1}, {64, 5632}}) {
    // Gates out to +-12: saturated on both sides as well as the curved middle.
    const std::vector<float> gate_up = RandomBf16Values(rows * 2 * width, 12.0f, rng_);
    const std::vector<float> gate = Columns(gate_up, 2 * width, 0, width);
    const std::vector<float> up = Columns(gate_up, 2 * width, width, width);
    DeviceBuffer<bf16> gate_up_d = UploadBf16(gate_up);
    DeviceBuffer<bf16> out_d = OrDie(DeviceBuffer<bf16>::Allocate(rows * width), "Allocate");
    SiluMulRows(gate_up_d.data(), rows, width, out_d.data(), stream());
    std::vector<float> want(rows * width);
    cpu::SiluMul(gate.data(), up.data(), rows * width, want.data());
    EXPECT_LE(NormalizedError(DownloadFloats(out_d), want), kOneRounding)
        << "rows " << rows << " width " << width;
  }
}

TEST_F(CudaOpsTest, SiluMulRowsOnUnalignedPointers) {
  // width % 8 == 0 but the pointers are 2 bytes past a 16-byte boundary: the one-element path.
  const int64_t rows = 3, width = 1024;
  const std::vector<float> gate_up = RandomBf16Values(rows * 2 * width + 1, 6.0f, rng_);
  const std::vector<float> body(gate_up.begin() + 1, gate_up.end());
  DeviceBuffer<bf16> gate_up_d = UploadBf16(gate_up);
  DeviceBuffer<bf16> out_d = OrDie(DeviceBuffer<bf16>::Allocate(rows * width + 1), "Allocate");
  SiluMulRows(gate_up_d.data() + 1, rows, width, out_d.data() + 1, stream());
  const std::vector<float> gate = Columns(body, 2 * width, 0, width);
  const std::vector<float> up = Columns(body, 2 * width, width, width);
  std::vector<float> want(rows * width);
  cpu::SiluMul(gate.data(), up.data(), rows * width, want.data());
  const std::vector<float> got = DownloadFloats(out_d);
  EXPECT_LE(NormalizedError(std::vector<float>(got.begin() + 1, got.end()), want), kOneRounding);
}

TEST_F(CudaOpsTest, GeluTanhMulRowsMatchesCpu) {
  for (const auto& [rows, width] :
       {std::pair<int64_t, int64_t>{1, 1152}, {5, 6912}, {3, 7}, {1, 1}}) {
    const std::vector<float> gate_up = RandomBf16Values(rows * 2 * width, 12.0f, rng_);
    const std::vector<float> gate = Columns(gate_up, 2 * width, 0, width);
    const std::vector<float> up = Columns(gate_up, 2 * width, width, width);
    DeviceBuffer<bf16> gate_up_d = UploadBf16(gate_up);
    DeviceBuffer<bf16> out_d = OrDie(DeviceBuffer<bf16>::Allocate(rows * width), "Allocate");
    GeluTanhMulRows(gate_up_d.data(), rows, width, out_d.data(), stream());
    std::vector<float> want(rows * width);
    cpu::GeluTanhMul(gate.data(), up.data(), rows * width, want.data());
    EXPECT_LE(NormalizedError(DownloadFloats(out_d), want), kOneRounding)
        << "rows " << rows << " width " << width;
  }
}

// Gemma's embedding scale: one rounding of each product.
TEST_F(CudaOpsTest, ScaleInPlaceMatchesCpu) {
  const std::vector<float> x = RandomBf16Values(5000, 3.0f, rng_);
  DeviceBuffer<bf16> x_d = UploadBf16(x);
  ScaleInPlace(x_d.data(), static_cast<int64_t>(x.size()), 33.94112549695428f, stream());
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] * 33.94112549695428f;
  EXPECT_LE(NormalizedError(DownloadFloats(x_d), want), kOneRounding);
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
