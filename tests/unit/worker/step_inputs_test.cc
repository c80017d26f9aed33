// PackStep and StepInputLayout: the packed arrays the CUDA model uploads, checked entry by entry
// against batches written out by hand.
#include "worker/step_inputs.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

constexpr int64_t kBlockSize = 16;
// Four query heads over two KV heads: one decode block per KV head and work item, so 512 items
// fill the 1,024 blocks the plan aims for (kernels/cuda/decode_work.h).
constexpr AttentionHeads kHeads{4, 2};

std::vector<int32_t> Slice(const PackedStep& p, int64_t offset, int64_t count) {
  return {p.data.begin() + offset, p.data.begin() + offset + count};
}

std::vector<int64_t> Slots(const PackedStep& p) {
  std::vector<int64_t> slots(p.shape.num_tokens);
  std::memcpy(slots.data(), p.data.data() + p.layout.slot_mapping, slots.size() * sizeof(int64_t));
  return slots;
}

// A 3-token prompt chunk at positions 0..2 in blocks [5, 6] and one decode token at position 17
// in blocks [1, 2, 9].
ForwardBatch MixedBatch() {
  ForwardBatchBuilder builder(kBlockSize);
  builder.AddSequence({11, 12, 13}, 0, {5, 6}, /*all_logits=*/false);
  builder.AddSequence({21}, 17, {1, 2, 9}, /*all_logits=*/false);
  return builder.Build();
}

ForwardBatch DecodeBatch() {
  ForwardBatchBuilder builder(kBlockSize);
  builder.AddSequence({7}, 4, {3}, /*all_logits=*/false);
  builder.AddSequence({8}, 20, {4, 8}, /*all_logits=*/false);
  return builder.Build();
}

TEST(StepInputLayout, ArraysFollowEachOtherAndSlotsAreEightByteAligned) {
  const StepInputLayout layout = StepInputLayout::For(3, 2, 2, 4, kHeads);
  EXPECT_EQ(layout.token_ids, 0);
  EXPECT_EQ(layout.positions, 3);
  EXPECT_EQ(layout.query_start, 6);
  EXPECT_EQ(layout.context_lens, 9);
  EXPECT_EQ(layout.logits_indices, 11);
  EXPECT_EQ(layout.decode_work, 13);     // 3 + 2 + 2 * (512 + 2) = 1,033 words
  EXPECT_EQ(layout.slot_mapping, 1046);  // already even
  EXPECT_EQ(layout.block_tables, 1052);  // last, so the rest is one contiguous copy
  EXPECT_EQ(layout.total, 1060);
  // 3 sequences: 15 + 3 + 3 + 2 * (512 + 3) = 1,051, rounded up.
  EXPECT_EQ(StepInputLayout::For(3, 3, 2, 4, kHeads).slot_mapping, 1052);
}

TEST(PackStep, MixedBatchKeepsEveryArrayAndCarriesOnlyUsedTableEntries) {
  const PackedStep p = PackStep(MixedBatch(), /*blocks_per_seq=*/4, kHeads);
  EXPECT_EQ(p.shape.num_tokens, 4);
  EXPECT_EQ(p.shape.num_seqs, 2);
  EXPECT_EQ(p.shape.num_logits, 2);
  EXPECT_EQ(p.shape.max_query_len, 3);
  EXPECT_EQ(p.shape.max_context_len, 18);
  EXPECT_EQ(p.shape.blocks_per_seq, 4);
  EXPECT_EQ(static_cast<int64_t>(p.data.size()), p.layout.block_tables);
  EXPECT_EQ(Slice(p, p.layout.token_ids, 4), (std::vector<int32_t>{11, 12, 13, 21}));
  EXPECT_EQ(Slice(p, p.layout.positions, 4), (std::vector<int32_t>{0, 1, 2, 17}));
  EXPECT_EQ(Slice(p, p.layout.query_start, 3), (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(Slice(p, p.layout.context_lens, 2), (std::vector<int32_t>{3, 18}));
  EXPECT_EQ(Slice(p, p.layout.logits_indices, 2), (std::vector<int32_t>{2, 3}));
  // Rows as wide as the widest table (3 of the 4 the device rows hold): only those are copied.
  EXPECT_EQ(p.used_blocks, 3);
  EXPECT_EQ(p.tables, (std::vector<int32_t>{5, 6, 0, 1, 2, 9}));
  EXPECT_EQ(Slots(p), (std::vector<int64_t>{80, 81, 82, 2 * kBlockSize + 1}));
}

TEST(PackStep, NarrowerRowsCutTheBlockTables) {
  const PackedStep p = PackStep(MixedBatch(), /*blocks_per_seq=*/2, kHeads);
  EXPECT_EQ(p.used_blocks, 2);
  EXPECT_EQ(p.tables, (std::vector<int32_t>{5, 6, 1, 2}));
}

TEST(PackStep, DecodePaddingAddsHarmlessSequences) {
  const PackedStep p = PackStep(DecodeBatch(), 2, kHeads, /*pad_to_seqs=*/4);
  EXPECT_EQ(p.shape.num_tokens, 4);
  EXPECT_EQ(p.shape.num_seqs, 4);
  EXPECT_EQ(p.shape.num_logits, 4);
  EXPECT_EQ(p.shape.max_query_len, 1);
  EXPECT_EQ(p.shape.max_context_len, 21);
  EXPECT_EQ(Slice(p, p.layout.token_ids, 4), (std::vector<int32_t>{7, 8, 0, 0}));
  EXPECT_EQ(Slice(p, p.layout.positions, 4), (std::vector<int32_t>{4, 20, 0, 0}));
  EXPECT_EQ(Slice(p, p.layout.query_start, 5), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Slice(p, p.layout.context_lens, 4), (std::vector<int32_t>{5, 21, 1, 1}));
  EXPECT_EQ(Slice(p, p.layout.logits_indices, 4), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(p.used_blocks, 2);
  EXPECT_EQ(p.tables, (std::vector<int32_t>{3, 0, 4, 8, 0, 0, 0, 0}));
  EXPECT_EQ(Slots(p), (std::vector<int64_t>{3 * kBlockSize + 4, 8 * kBlockSize + 4, -1, -1}));
  // The work list: 28 context tokens in all against 512 items wanted give the 64-token minimum
  // partition, so one item per sequence, padding included (each has its one token).
  EXPECT_EQ(Slice(p, p.layout.decode_work, 3 + 4 + 8),
            (std::vector<int32_t>{4, 64, 0, 1, 2, 3, 4, 0, 0, 1, 0, 2, 0, 3, 0}));
  // The layout is the one a graph captured for 4 sequences reads.
  const StepInputLayout graph = StepInputLayout::For(4, 4, 4, 2, kHeads);
  EXPECT_EQ(p.layout.slot_mapping, graph.slot_mapping);
  EXPECT_EQ(p.layout.total, graph.total);
}

TEST(PackStep, EmptyBatchPaddedIsAllPadding) {
  const PackedStep p = PackStep(ForwardBatch{}, 3, kHeads, /*pad_to_seqs=*/2);
  EXPECT_EQ(Slice(p, p.layout.query_start, 3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(Slice(p, p.layout.context_lens, 2), (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(Slots(p), (std::vector<int64_t>{-1, -1}));
  EXPECT_EQ(p.used_blocks, 1);  // the padding rows' block 0
  EXPECT_EQ(p.tables, (std::vector<int32_t>{0, 0}));
}

// Every step carries a list of its decode rows: beside a 3-token prefill (the prefill kernel's),
// a decode at context 100 takes 64-token partitions, two items.
TEST(PackStep, WorkListCutsEachDecodeContextIntoPartitions) {
  ForwardBatchBuilder builder(kBlockSize);
  builder.AddSequence({1, 2, 3}, 0, {5}, /*all_logits=*/false);
  builder.AddSequence({9}, 99, {6, 7, 8, 10, 11, 12, 13}, /*all_logits=*/false);
  const PackedStep p = PackStep(builder.Build(), 7, kHeads);
  EXPECT_EQ(Slice(p, p.layout.decode_work, 3 + 2 + 4),
            (std::vector<int32_t>{2, 64, 0, 0, 2, 1, 0, 1, 1}));
}

TEST(IsDecodeBatch, OnlyOneTokenPerSequenceWithEveryLogit) {
  EXPECT_TRUE(IsDecodeBatch(DecodeBatch()));
  EXPECT_FALSE(IsDecodeBatch(MixedBatch()));
  ForwardBatchBuilder scoring(kBlockSize);
  scoring.AddSequence({1, 2}, 0, {0}, /*all_logits=*/true);
  EXPECT_FALSE(IsDecodeBatch(scoring.Build()));
}

}  // namespace
}  // namespace tpserve
