// `tpctl plan`: what a model needs on a given set of GPUs under tpserve's sharding
// (model/shard_layout.h: attention by heads, KV heads replicated where TP exceeds them, the MLP
// and the lm_head balanced, the embedding on every rank of the first pipeline stage, and of the
// last where it is the lm_head too; the layers balanced between pipeline stages), before anything
// is deployed: weights per rank, the KV pool that is left, the sequences that fit at a context
// length, and the bandwidth-bound batch-1 decode time with the all-reduces and the stage-to-stage
// transfers it adds. Each stage's tensor-parallel rank 0 is reported: the balanced splits give it
// the most.
//
// Estimates by construction: decode reads every weight of the rank once per token (and the KV of
// the context) at the HBM bandwidth given; each of the 2 all-reduces per layer costs a latency
// plus a ring's 2 (T − 1) / T of the hidden state over the slowest link it crosses (NVLink
// within a node, the network when T spans nodes). Ranks fill nodes in order, rank = stage × T +
// tensor-parallel rank; at a stage boundary each rank sends its token's hidden state (bf16) to
// the same tensor-parallel rank of the next stage, a latency plus the bytes over the link they
// share. At batch 1 the stages run one after the other: their times add up. FP8 weights are the
// layers' linear weights in e4m3 with one fp32 scale per output row; the embedding, the lm_head
// and the norms stay bf16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/model_config.h"

namespace tpserve {

enum class PlanDtype { kBf16, kFp8 };

struct PlanHardware {
  int tp = 1;
  int pp = 1;  // pipeline stages of `tp` GPUs each
  int gpus_per_node = 8;
  double gpu_memory_gib = 80;
  double gpu_memory_utilization = 0.9;  // as the worker's --gpu-memory-utilization
  double overhead_gib = 1;              // activations, workspaces, CUDA graphs
  double hbm_tb_per_s = 3.35;
  double nvlink_gb_per_s = 450;  // per GPU and direction
  double network_gb_per_s = 50;  // per GPU and direction, between nodes
  double nvlink_latency_us = 10;
  double network_latency_us = 25;
  int block_size = 16;
};

// One pipeline stage, its tensor-parallel rank 0.
struct StagePlan {
  int64_t first_layer = 0;
  int64_t layers = 0;
  int64_t rank_weight_bytes = 0;
  int64_t kv_bytes_per_token = 0;
  int64_t kv_blocks = 0;          // what the rest of its memory holds
  int64_t decode_read_bytes = 0;  // per token at batch 1
  double decode_ms = 0;
  double allreduce_ms = 0;
};

// With several stages the totals are over them: the weights and KV bytes of the fullest stage,
// the pool of the one that holds the fewest blocks (block ids are global), the decode bytes and
// times added up.
struct PlanResult {
  int64_t params = 0;              // the whole model
  int64_t rank_weight_bytes = 0;   // rank 0's
  int64_t kv_bytes_per_token = 0;  // rank 0's share of one token's K and V
  int64_t kv_blocks = 0;           // what the rest of rank 0's memory holds
  int64_t kv_tokens = 0;
  int64_t sequences = 0;          // of `context` tokens each
  int64_t decode_read_bytes = 0;  // per token at batch 1, rank 0: weights and the context's KV
  double decode_ms = 0;           // decode_read_bytes at the HBM bandwidth
  double allreduce_ms = 0;        // per step at batch 1
  double p2p_ms = 0;              // the hidden states' hops between stages, per step at batch 1
  std::vector<StagePlan> stages;  // one per pipeline stage
  int nodes = 1;
  std::string warning;  // e.g. the weights do not fit
};

// INVALID_ARGUMENT naming the flag for a TP size that cannot split the heads, more stages than
// layers, or values out of range.
absl::StatusOr<PlanResult> PlanCapacity(const ModelConfig& config, PlanDtype weights,
                                        PlanDtype kv_cache, const PlanHardware& hardware,
                                        int64_t context);

}  // namespace tpserve
