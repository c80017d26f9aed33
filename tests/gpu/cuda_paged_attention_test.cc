// cuda::PagedAttention (decode and prefill kernels) against cpu::PagedAttention on the same
// bf16-representable inputs, and the host-side shape and workspace rules (those run anywhere).
//
// Tolerance: the normalized error ||gpu - cpu||_2 / ||cpu||_2, taken per sequence (so that one
// broken sequence is not diluted by the others), must be <= 8e-3. Both sides see identical inputs
// and accumulate in fp32, so the difference is the kernel's bf16 roundings, each with unit
// roundoff u = 2^-8 = 3.9e-3 (8 significant bits):
//  - the output is rounded to bf16 once: relative error <= u per element, ~1.6e-3 RMS;
//  - the prefill kernel also rounds each softmax weight to bf16 for the tensor-core P.V product
//    (relative <= u per weight), another ~1.6e-3 of |out| for values of independent signs.
// So ~1.8e-3 is expected for decode and ~2.5e-3 for prefill, and 2u = 7.8e-3 bounds the two
// roundings. A real defect is far above that: letting one future key through moves the outputs
// by ~50%, dropping or adding one key of 2,000 under a flat softmax by ~2%, reading a wrong block
// by ~100% (and unused blocks hold NaN).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/check.h"
#include "common/cuda_check.h"
#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/bf16.h"
#include "kernels/cuda/decode_work.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/paged_attention.h"
#include "tests/gpu/gpu_test_util.h"

namespace tpserve::cuda {
namespace {

constexpr double kTolerance = 8e-3;

struct Sequence {
  int32_t context_len;  // cached tokens after this step
  int32_t q_len;        // tokens computed this step: the last q_len of the context
};

struct AttentionCase {
  std::string name;
  std::vector<Sequence> seqs;
  int64_t head_dim = 128;
  int64_t group = 1;  // query heads per KV head
  int64_t num_kv_heads = 2;
  int64_t block_size = 16;
  float q_magnitude = 1.0f;  // q elements uniform in [-q_magnitude, q_magnitude]
  // FP8 E4M3 caches holding value / the KV head's scale; the CPU op reads the same codes. KV head
  // g's K scale is kv_scale * (1 + g), its V scale kv_scale * (2 + g) / 2: every head's differs,
  // and K's from V's.
  bool fp8 = false;
  float kv_scale = 1.0f;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << c.name << " (head_dim " << c.head_dim << ", group " << c.group << ", block_size "
      << c.block_size << (c.fp8 ? ", FP8 KV" : "") << ")";
}

// Uniform in [-scale, scale], rounded to bf16; `exact` gets the same values as floats.
std::vector<bf16> RandomBf16(int64_t n, float scale, std::mt19937_64& rng,
                             std::vector<float>* exact) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<bf16> out(n);
  exact->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = ToBf16(dist(rng));
    (*exact)[i] = ToFloat(out[i]);
  }
  return out;
}

template <typename T>
DeviceBuffer<T> Upload(const std::vector<T>& host) {
  absl::StatusOr<DeviceBuffer<T>> buffer = DeviceBuffer<T>::Allocate(host.size());
  TP_CHECK(buffer.ok());
  TP_CHECK(buffer->CopyFromHost(host).ok());
  return *std::move(buffer);
}

// Per-sequence normalized errors of the GPU result against the CPU op; +inf for a sequence whose
// output has a non-finite value (an output never written stays NaN).
std::vector<double> RunAndCompare(const AttentionCase& c) {
  const int64_t num_seqs = c.seqs.size();
  const int64_t kv_heads = c.num_kv_heads;
  const int64_t num_heads = kv_heads * c.group;
  const int64_t head_dim = c.head_dim;
  const int64_t bs = c.block_size;
  const int64_t row = kv_heads * head_dim;  // elements per cache slot
  std::mt19937_64 rng(7 + 1000 * c.group + head_dim + 10 * bs + num_seqs);

  // Block tables from a shuffled pool with spare blocks; unused table entries are -1 and unused
  // blocks hold NaN, so reading either poisons the output.
  int64_t max_blocks = 1, needed = 0;
  int32_t max_context = 0, max_query = 0;
  std::vector<int32_t> query_start = {0}, context_lens;
  for (const Sequence& s : c.seqs) {
    const int64_t blocks = (s.context_len + bs - 1) / bs;
    max_blocks = std::max(max_blocks, blocks + 1);
    needed += blocks;
    max_context = std::max(max_context, s.context_len);
    max_query = std::max(max_query, s.q_len);
    query_start.push_back(query_start.back() + s.q_len);
    context_lens.push_back(s.context_len);
  }
  const int64_t num_blocks = needed + 7;
  std::vector<int32_t> pool(num_blocks);
  for (int32_t b = 0; b < num_blocks; ++b) pool[b] = b;
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int32_t> block_tables(num_seqs * max_blocks, -1);
  size_t next = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t b = 0; b * bs < c.seqs[s].context_len; ++b) {
      block_tables[s * max_blocks + b] = pool[next++];
    }
  }

  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> k_cache(num_blocks * bs * row, nan), v_cache(num_blocks * bs * row, nan);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t ctx = c.seqs[s].context_len;
    std::vector<float> k, v;
    RandomBf16(ctx * row, 1.0f, rng, &k);
    RandomBf16(ctx * row, 1.0f, rng, &v);
    std::vector<int64_t> slots(ctx);
    for (int64_t pos = 0; pos < ctx; ++pos) {
      slots[pos] = int64_t{block_tables[s * max_blocks + pos / bs]} * bs + pos % bs;
    }
    cpu::WriteKvCache(k.data(), v.data(), slots.data(), ctx, kv_heads, head_dim, k_cache.data(),
                      v_cache.data());
  }
  const int64_t num_tokens = query_start.back();
  std::vector<float> q;
  const std::vector<bf16> q_bf16 =
      RandomBf16(num_tokens * num_heads * head_dim, c.q_magnitude, rng, &q);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));

  std::vector<float> want(num_tokens * num_heads * head_dim, nan);
  cpu::PagedAttentionParams cp;
  // FP8: the codes of value / the head's scale; the unused blocks' NaN become the NaN code 0x7F.
  std::vector<uint8_t> k_codes, v_codes;
  std::vector<float> k_scales, v_scales;
  for (int64_t g = 0; g < kv_heads; ++g) {
    k_scales.push_back(c.kv_scale * static_cast<float>(1 + g));
    v_scales.push_back(c.kv_scale * static_cast<float>(2 + g) / 2);
  }
  cp.q = q.data();
  if (c.fp8) {
    k_codes.resize(k_cache.size());
    v_codes.resize(v_cache.size());
    for (int64_t r = 0; r * head_dim < static_cast<int64_t>(k_cache.size()); ++r) {
      const int64_t g = r % kv_heads;
      cpu::QuantizeE4m3(k_cache.data() + r * head_dim, head_dim, k_scales[g],
                        k_codes.data() + r * head_dim);
      cpu::QuantizeE4m3(v_cache.data() + r * head_dim, head_dim, v_scales[g],
                        v_codes.data() + r * head_dim);
    }
    cp.k_cache_fp8 = k_codes.data();
    cp.v_cache_fp8 = v_codes.data();
    cp.k_scales = k_scales.data();
    cp.v_scales = v_scales.data();
  } else {
    cp.k_cache = k_cache.data();
    cp.v_cache = v_cache.data();
  }
  cp.num_seqs = num_seqs;
  cp.query_start = query_start.data();
  cp.context_lens = context_lens.data();
  cp.block_tables = block_tables.data();
  cp.max_blocks_per_seq = max_blocks;
  cp.num_heads = num_heads;
  cp.num_kv_heads = kv_heads;
  cp.head_dim = head_dim;
  cp.block_size = bs;
  cp.scale = scale;
  cp.out = want.data();
  cpu::PagedAttention(cp);

  DeviceBuffer<bf16> d_q = Upload(q_bf16);
  DeviceBuffer<bf16> d_k = Upload(ToBf16(c.fp8 ? std::vector<float>() : k_cache));
  DeviceBuffer<bf16> d_v = Upload(ToBf16(c.fp8 ? std::vector<float>() : v_cache));
  DeviceBuffer<uint8_t> d_k8 = Upload(k_codes);
  DeviceBuffer<uint8_t> d_v8 = Upload(v_codes);
  DeviceBuffer<float> d_k_scales = Upload(k_scales);
  DeviceBuffer<float> d_v_scales = Upload(v_scales);
  DeviceBuffer<bf16> d_out = Upload(ToBf16(std::vector<float>(want.size(), nan)));
  DeviceBuffer<int32_t> d_query_start = Upload(query_start);
  DeviceBuffer<int32_t> d_context_lens = Upload(context_lens);
  DeviceBuffer<int32_t> d_block_tables = Upload(block_tables);
  std::vector<int32_t> work(DecodeWorkWords(num_seqs, num_heads, kv_heads));
  BuildDecodeWork(context_lens, query_start, num_heads, kv_heads, work.data());
  DeviceBuffer<int32_t> d_work = Upload(work);
  const size_t workspace_bytes =
      PagedAttentionWorkspaceBytes(num_seqs, num_heads, kv_heads, head_dim);
  absl::StatusOr<DeviceBuffer<uint8_t>> workspace =
      DeviceBuffer<uint8_t>::Allocate(workspace_bytes);
  TP_CHECK(workspace.ok());

  PagedAttentionParams p;
  p.q = d_q.data();
  if (c.fp8) {
    p.k_cache_fp8 = d_k8.data();
    p.v_cache_fp8 = d_v8.data();
    p.k_scales = d_k_scales.data();
    p.v_scales = d_v_scales.data();
  } else {
    p.k_cache = d_k.data();
    p.v_cache = d_v.data();
  }
  p.query_start = d_query_start.data();
  p.context_lens = d_context_lens.data();
  p.block_tables = d_block_tables.data();
  p.out = d_out.data();
  p.num_tokens = num_tokens;
  p.max_query_len = max_query;
  p.max_context_len = max_context;
  p.num_seqs = num_seqs;
  p.max_blocks_per_seq = max_blocks;
  p.num_heads = num_heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = bs;
  p.scale = scale;
  p.decode_work = d_work.data();
  p.workspace = workspace->data();
  p.workspace_bytes = workspace_bytes;
  PagedAttention(p, /*stream=*/nullptr);
  const absl::Status synced = CudaStatus(cudaDeviceSynchronize(), "PagedAttention");
  EXPECT_TRUE(synced.ok()) << synced;
  std::vector<bf16> got_bf16(want.size());
  TP_CHECK(d_out.CopyToHost(absl::MakeSpan(got_bf16)).ok());
  const std::vector<float> got = ToFloat(got_bf16);

  std::vector<double> errors;
  const int64_t token_elements = num_heads * head_dim;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const auto first = query_start[s] * token_elements, last = query_start[s + 1] * token_elements;
    const std::vector<float> got_s(got.begin() + first, got.begin() + last);
    const std::vector<float> want_s(want.begin() + first, want.begin() + last);
    const double error = gpu_test::NormalizedError(got_s, want_s);
    errors.push_back(std::isfinite(error) ? error : std::numeric_limits<double>::infinity());
  }
  return errors;
}

void ExpectMatchesCpu(const AttentionCase& c) {
  const std::vector<double> errors = RunAndCompare(c);
  for (size_t s = 0; s < errors.size(); ++s) {
    EXPECT_LE(errors[s], kTolerance) << "sequence " << s << " (context " << c.seqs[s].context_len
                                     << ", " << c.seqs[s].q_len << " query tokens)";
  }
}

// One query token each: lengths below, at and just past block (16) and partition boundaries
// (the decode split uses 64-token partitions for a batch this small), a single-token context,
// and a sequence with no token this step.
const std::vector<Sequence> kDecodeBatch = {{1, 1},   {15, 1},  {16, 1},   {17, 1},
                                            {64, 1},  {65, 1},  {100, 1},  {33, 0},
                                            {129, 1}, {700, 1}, {1500, 1}, {2049, 1}};

// Prefill from scratch over several query tiles, chunked prefill after a cached prefix (query
// tokens at the end of a longer context), exact tile sizes, decode tokens mixed in (the decode
// kernel's, the longer one split into several items and merged), and a sequence with no token
// this step.
const std::vector<Sequence> kPrefillBatch = {{200, 200},  {150, 70}, {300, 5}, {17, 17},
                                             {64, 64},    {130, 1},  {33, 0},  {129, 65},
                                             {1000, 130}, {2049, 1}};

std::vector<AttentionCase> Cases() {
  std::vector<AttentionCase> cases;
  for (int64_t head_dim : {64, 128}) {
    for (int64_t group : {1, 3, 8}) {
      cases.push_back(
          {.name = "decode", .seqs = kDecodeBatch, .head_dim = head_dim, .group = group});
      cases.push_back(
          {.name = "prefill", .seqs = kPrefillBatch, .head_dim = head_dim, .group = group});
    }
  }
  // Group 12: two decode blocks per KV head (8 + 4 query heads). Block size 8.
  cases.push_back(
      {.name = "decode", .seqs = kDecodeBatch, .head_dim = 128, .group = 12, .block_size = 8});
  // A block size that is not a power of two, one KV head.
  cases.push_back({.name = "prefill",
                   .seqs = kPrefillBatch,
                   .head_dim = 64,
                   .group = 4,
                   .num_kv_heads = 1,
                   .block_size = 7});
  // Peaked softmax (scores with standard deviation ~5): the running max moves, and the online
  // rescaling must hold.
  cases.push_back({.name = "decode peaked",
                   .seqs = kDecodeBatch,
                   .head_dim = 128,
                   .group = 4,
                   .q_magnitude = 16.0f});
  cases.push_back({.name = "prefill peaked",
                   .seqs = kPrefillBatch,
                   .head_dim = 128,
                   .group = 4,
                   .q_magnitude = 16.0f});
  // FP8 caches: both kernels, both head sizes, a scale that is not a power of two (values up to
  // 1 / 0.01 = 100 in codes), group 1 and the padded group 3.
  for (int64_t head_dim : {64, 128}) {
    for (int64_t group : {1, 3}) {
      for (const auto& [name, seqs] :
           {std::pair{"decode fp8", kDecodeBatch}, std::pair{"prefill fp8", kPrefillBatch}}) {
        cases.push_back({.name = name,
                         .seqs = seqs,
                         .head_dim = head_dim,
                         .group = group,
                         .fp8 = true,
                         .kv_scale = 0.01f});
      }
    }
  }
  return cases;
}

class CudaPagedAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(CudaPagedAttentionTest, MatchesCpu) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  ExpectMatchesCpu(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaPagedAttentionTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           std::string name = info.param.name + "_hd" +
                                              std::to_string(info.param.head_dim) + "_group" +
                                              std::to_string(info.param.group) + "_bs" +
                                              std::to_string(info.param.block_size);
                           std::replace(name.begin(), name.end(), ' ', '_');
                           return name;
                         });

// One batch from a single token to 32k: the work list gives the long sequences many items and
// the short ones one. With 96 query heads over 8 KV heads (group 12: two blocks per KV head, so
// 64 items fill the grid) the 60,205 tokens with a query take 960-token partitions: each block
// stages its partition in two chunks of at most 512 slots, the path every batch with more than
// 64 items' worth of 512 tokens takes.
TEST(CudaPagedAttentionLargeTest, DecodeMixedContextsOneTo32k) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  const std::vector<Sequence> seqs = {{1, 1},    {32768, 1}, {3, 1},    {9000, 1},
                                      {2049, 1}, {40, 0},    {16384, 1}};
  std::vector<int32_t> context, query_start = {0};
  for (const Sequence& s : seqs) {
    context.push_back(s.context_len);
    query_start.push_back(query_start.back() + s.q_len);
  }
  std::vector<int32_t> work(DecodeWorkWords(seqs.size(), 96, 8));
  BuildDecodeWork(context, query_start, 96, 8, work.data());
  ASSERT_EQ(work[1], 960);
  ASSERT_GT(work[1], kDecodeChunkTokens);
  for (const bool fp8 : {false, true}) {
    ExpectMatchesCpu({.name = fp8 ? "decode mixed fp8" : "decode mixed",
                      .seqs = seqs,
                      .head_dim = 128,
                      .group = 12,
                      .num_kv_heads = 8,
                      .fp8 = fp8,
                      .kv_scale = 0.01f});
  }
}

// The shape the decode kernel is tuned for: batch 64 around 2k context (Llama-3-8B head_dim and
// group), which the plan cuts into partitions of a few hundred tokens with two KV heads.
TEST(CudaPagedAttentionLargeTest, DecodeBatch64Around2kContext) {
  TP_SKIP_WITHOUT_CUDA_DEVICES(1);
  std::mt19937 rng(64);
  std::uniform_int_distribution<int32_t> length(1900, 2200);
  AttentionCase c{.name = "decode batch 64", .seqs = {}, .head_dim = 128, .group = 4};
  for (int i = 0; i < 64; ++i) c.seqs.push_back({length(rng), 1});
  ExpectMatchesCpu(c);
}

TEST(CudaPagedAttentionSupportedTest, HeadDims64And128Only) {
  EXPECT_TRUE(PagedAttentionSupported(32, 8, 128, 16).ok());
  EXPECT_TRUE(PagedAttentionSupported(9, 3, 64, 16).ok());
  for (int64_t head_dim : {32, 80, 96, 256}) {
    const absl::Status status = PagedAttentionSupported(32, 8, head_dim, 16);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << head_dim;
    EXPECT_NE(status.message().find(std::to_string(head_dim)), std::string::npos) << status;
  }
  EXPECT_EQ(PagedAttentionSupported(32, 6, 128, 16).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PagedAttentionSupported(32, 8, 128, 0).code(), absl::StatusCode::kInvalidArgument);
}

// The work list of every batch in a sweep: within DecodeMaxWorkItems, each sequence with one
// query token cut into ceil(context / partition_tokens) consecutive items (partitions 0, 1, ...)
// and the others (none, or a prefill's several) into none, partition_tokens a multiple of 64.
TEST(CudaDecodeWorkTest, CoversEveryContextOnceWithinTheBound) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> length(1, 33000);
  for (const auto& [heads, kv_heads] :
       {std::pair<int64_t, int64_t>{32, 8}, {8, 1}, {9, 3}, {24, 2}, {64, 4}}) {
    for (int64_t seqs : {1, 2, 7, 64, 160}) {
      for (int round = 0; round < 4; ++round) {
        std::vector<int32_t> context(seqs), query_start = {0};
        for (int64_t s = 0; s < seqs; ++s) {
          context[s] = round == 0 ? 1 : length(rng);
          query_start.push_back(query_start.back() + (s % 5 == 4 ? 0 : s % 7 == 6 ? 3 : 1));
        }
        std::vector<int32_t> work(DecodeWorkWords(seqs, heads, kv_heads), -7);
        BuildDecodeWork(context, query_start, heads, kv_heads, work.data());
        const int32_t count = work[0], partition = work[1];
        ASSERT_LE(count, DecodeMaxWorkItems(seqs, heads, kv_heads));
        ASSERT_TRUE(partition > 0 && partition % 64 == 0) << partition;
        const int32_t* item_start = work.data() + 2;
        const int32_t* items = work.data() + DecodeWorkItemsOffset(seqs);
        ASSERT_EQ(item_start[0], 0);
        ASSERT_EQ(item_start[seqs], count);
        for (int64_t s = 0; s < seqs; ++s) {
          const int32_t want = query_start[s + 1] - query_start[s] == 1
                                   ? (context[s] + partition - 1) / partition
                                   : 0;
          ASSERT_EQ(item_start[s + 1] - item_start[s], want) << "sequence " << s;
          for (int32_t i = item_start[s]; i < item_start[s + 1]; ++i) {
            ASSERT_EQ(items[2 * i], s);
            ASSERT_EQ(items[2 * i + 1], i - item_start[s]);
          }
        }
      }
    }
  }
}

// Plans worked by hand. Llama-3-8B heads (32 over 8 KV heads, one block per KV head and item):
// items that fill 1,024 blocks are 128, so a 131,072-token context, alone or as 64 sequences of
// 2,048, gets 1,024-token partitions and 128 items. Group 8 over one KV head: 1,024 items target,
// so 5,101 tokens in all take the 64-token minimum: 1 + 2 + 79 items.
TEST(CudaDecodeWorkTest, PlansWorkedByHand) {
  struct Plan {
    int64_t heads, kv_heads;
    std::vector<int32_t> context;
    int32_t partition, items;
  };
  const std::vector<int32_t> batch64(64, 2048);
  for (const Plan& plan : {Plan{32, 8, {131072}, 1024, 128}, Plan{32, 8, batch64, 1024, 128},
                           Plan{8, 1, {1, 100, 5000}, 64, 82}}) {
    std::vector<int32_t> query_start(plan.context.size() + 1);
    std::iota(query_start.begin(), query_start.end(), 0);
    std::vector<int32_t> work(DecodeWorkWords(plan.context.size(), plan.heads, plan.kv_heads));
    BuildDecodeWork(plan.context, query_start, plan.heads, plan.kv_heads, work.data());
    EXPECT_EQ(work[1], plan.partition);
    EXPECT_EQ(work[0], plan.items);
  }
  EXPECT_EQ(DecodeMaxWorkItems(256, 32, 8), 128 + 256);
  EXPECT_EQ(DecodeMaxWorkItems(4, 8, 1), 1024 + 4);
  EXPECT_EQ(DecodeMaxWorkItems(4, 96, 8), 64 + 4);  // group 12: two blocks per KV head
}

// The workspace depends on the batch size alone: 384 items x 32 heads = 12,288 entries, two
// arrays of 49,152 bytes (already 256-aligned) and 12,288 x 128 fp32 accumulators.
TEST(CudaDecodeWorkTest, WorkspaceIsBoundedByTheBatchSize) {
  EXPECT_EQ(PagedAttentionWorkspaceBytes(256, 32, 8, 128), 2u * 49152 + 12288u * 128 * 4);
  const DecodeWorkspaceLayout layout = DecodeWorkspaceFor(256, 32, 8, 128);
  EXPECT_EQ(layout.sum_offset, 49152u);
  EXPECT_EQ(layout.acc_offset, 2u * 49152);
}

}  // namespace
}  // namespace tpserve::cuda
