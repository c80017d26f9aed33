// The integer arrays of a step packed into one buffer, as the CUDA model uploads them: token ids,
// positions, query starts, context lengths, logits indices, the decode attention's work list
// (kernels/cuda/decode_work.h) and the 64-bit slot mapping in one copy, then the block tables, a
// fixed row stride on the device of which only each row's used entries are copied (one pitched
// copy: a graph planned for a 128k context uploads what this step's sequences hold, not 8 MB). A
// decode step that runs a captured CUDA graph is padded to the graph's batch size; the graph was
// captured reading the arrays at the offsets of StepInputLayout::For(that size), so the layout is a
// pure function of the sizes.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/forward_batch.h"

namespace tpserve {

// The attention heads of one rank, which size the decode work list.
struct AttentionHeads {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
};

// Offsets in int32 units into the packed buffer. `slot_mapping` is even, so with a base that is
// 8-byte aligned (any device allocation) its int64 values are aligned.
struct StepInputLayout {
  int64_t token_ids = 0;       // [num_tokens]
  int64_t positions = 0;       // [num_tokens]
  int64_t query_start = 0;     // [num_seqs + 1]
  int64_t context_lens = 0;    // [num_seqs]
  int64_t logits_indices = 0;  // [num_logits]
  int64_t decode_work = 0;     // [DecodeWorkWords(num_seqs, heads)]
  int64_t slot_mapping = 0;    // [num_tokens] int64, two int32 units each
  int64_t block_tables = 0;    // [num_seqs, blocks_per_seq], last
  int64_t total = 0;           // int32 units in all

  static StepInputLayout For(int64_t num_tokens, int64_t num_seqs, int64_t num_logits,
                             int64_t blocks_per_seq, const AttentionHeads& heads);
};

// Host facts of a packed step that size the kernels' grids.
struct StepShape {
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t num_logits = 0;
  int32_t max_query_len = 0;
  int32_t max_context_len = 0;
  int64_t blocks_per_seq = 0;  // the block tables' row stride on the device
};

struct PackedStep {
  StepShape shape;
  StepInputLayout layout;
  std::vector<int32_t> data;  // [layout.block_tables]: every array but the block tables
  // The block tables' used part: [num_seqs, used_blocks], copied to rows of blocks_per_seq.
  std::vector<int32_t> tables;
  int64_t used_blocks = 0;
};

// Packs `batch` for block-table rows of `blocks_per_seq` entries on the device; the rows carried
// are as wide as the batch's widest table (at most blocks_per_seq, at least 1): a row longer than
// that is cut (entries past a sequence's context are never read, and `blocks_per_seq` must cover
// the longest context), a shorter one is filled with block 0.
//
// pad_to_seqs > batch.num_seqs() (decode only: one token per sequence, logits for each in order)
// appends padding sequences up to that many: token 0 at position 0, slot -1 (the KV write skips
// it), context 1 reading block 0, its own logits row. Their outputs are computed and ignored. The
// shape then describes the padded batch. The work list covers the padded batch's contexts.
PackedStep PackStep(const ForwardBatch& batch, int64_t blocks_per_seq, const AttentionHeads& heads,
                    int64_t pad_to_seqs = 0);

// True when `batch` is a pure decode step a decode graph can run: one token per sequence and the
// logits of every token, in order.
bool IsDecodeBatch(const ForwardBatch& batch);

}  // namespace tpserve
