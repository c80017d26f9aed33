#include "worker/cuda/cuda_lora_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cuda_check.h"
#include "common/status_macros.h"
#include "kernels/cuda/lora_product.h"

namespace tpserve::cuda {
namespace {

static_assert(kMaxLoraGroupTokens == kLoraGroupTokens);
static_assert(sizeof(LoraTokenGroup) == (2 + kLoraGroupTokens) * sizeof(int32_t),
              "the groups are uploaded as they are");
static_assert(kMaxLoraRank <= kMaxLoraKernelRank);

}  // namespace

CudaLoraPool::CudaLoraPool(const ModelConfig& config, const ShardLayout& layout, int32_t slots,
                           int64_t max_rank)
    : num_layers_(layout.layers.size), max_rank_(max_rank), resident_(slots) {
  const int64_t hidden = config.hidden_size;
  const int64_t q_width = layout.q_width(config.head_dim);
  const int64_t kv_width = layout.kv_width(config.head_dim);
  const int64_t ffn = layout.ffn.size;
  // The slices ShardLora makes: column-parallel targets into the fused rows, row-parallel ones
  // from this rank's input columns.
  auto set = [&](LoraTarget t, int64_t in, int64_t out, int64_t offset) {
    Module& m = modules_[static_cast<int>(t)];
    m = Module{in, out, offset, layer_stride_, layer_stride_ + max_rank * in};
    layer_stride_ += max_rank * (in + out);
  };
  set(LoraTarget::kQ, hidden, q_width, 0);
  set(LoraTarget::kK, hidden, kv_width, q_width);
  set(LoraTarget::kV, hidden, kv_width, q_width + kv_width);
  set(LoraTarget::kO, q_width, hidden, 0);
  set(LoraTarget::kGate, hidden, ffn, 0);
  set(LoraTarget::kUp, hidden, ffn, ffn);
  set(LoraTarget::kDown, ffn, hidden, 0);
  slot_stride_ = num_layers_ * layer_stride_;
}

absl::StatusOr<std::unique_ptr<CudaLoraPool>> CudaLoraPool::Create(const ModelConfig& config,
                                                                   const ShardLayout& layout,
                                                                   int32_t slots, int64_t max_rank,
                                                                   int64_t max_tokens) {
  if (slots < 1 || max_rank < 1 || max_rank > kMaxLoraKernelRank || max_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA LoRA pool: ", slots,
                                                   " slots of rank up to ", max_rank, " for ",
                                                   max_tokens, " tokens"));
  }
  std::unique_ptr<CudaLoraPool> pool(new CudaLoraPool(config, layout, slots, max_rank));
  // Each slot's groups are full but its last one.
  const int64_t max_groups = max_tokens / kLoraGroupTokens + std::min<int64_t>(slots, max_tokens);
  ASSIGN_OR_RETURN(pool->pool_, DeviceBuffer<bf16>::Allocate(slots * pool->slot_stride_));
  ASSIGN_OR_RETURN(pool->ranks_,
                   DeviceBuffer<int32_t>::Allocate(slots * pool->num_layers_ * kNumLoraTargets));
  ASSIGN_OR_RETURN(pool->groups_, DeviceBuffer<int32_t>::Allocate(
                                      max_groups * static_cast<int64_t>(sizeof(LoraTokenGroup) /
                                                                        sizeof(int32_t))));
  ASSIGN_OR_RETURN(pool->scratch_,
                   DeviceBuffer<float>::Allocate(max_groups * kLoraGroupTokens * max_rank));
  // An empty slot targets nothing. Finished before any step's upload, whichever stream that uses.
  RETURN_IF_ERROR(CudaStatus(cudaMemset(pool->ranks_.data(), 0, pool->ranks_.bytes()),
                             "LoRA rank table clear"));
  RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "LoRA rank table clear"));
  return pool;
}

int64_t CudaLoraPool::bytes() const {
  return pool_.bytes() + ranks_.bytes() + groups_.bytes() + scratch_.bytes();
}

absl::Status CudaLoraPool::Upload(int32_t slot, const LoraShard& shard, cudaStream_t stream) {
  if (static_cast<int64_t>(shard.layers.size()) != num_layers_) {
    return absl::InvalidArgumentError(absl::StrCat("LoRA slot ", slot, ": the adapter has ",
                                                   shard.layers.size(), " layers; the stage ",
                                                   num_layers_));
  }
  staging_.resize(slot_stride_);
  std::vector<int32_t> ranks(num_layers_ * kNumLoraTargets, 0);
  for (int64_t l = 0; l < num_layers_; ++l) {
    const LoraLayerShard& layer = shard.layers[l];
    for (const auto* slices : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down}) {
      for (const LoraSlice& s : *slices) {
        const int t = static_cast<int>(s.target);
        const Module& m = modules_[t];
        if (s.in != m.in || s.out != m.out || s.offset != m.offset || s.rank > max_rank_) {
          return absl::InvalidArgumentError(absl::StrCat(
              "LoRA slot ", slot, ": ", LoraTargetName(s.target), " of layer ", l, " has rank ",
              s.rank, " and shape [", s.out, ", ", s.in, "]; this worker holds rank up to ",
              max_rank_, " and shape [", m.out, ", ", m.in, "]"));
        }
        bf16* a = staging_.data() + l * layer_stride_ + m.a;
        bf16* bt = staging_.data() + l * layer_stride_ + m.bt;
        std::transform(s.a.begin(), s.a.end(), a, [](float v) { return ToBf16(v); });
        std::transform(s.bt.begin(), s.bt.end(), bt, [](float v) { return ToBf16(v); });
        ranks[l * kNumLoraTargets + t] = static_cast<int32_t>(s.rank);
      }
    }
  }
  // From pageable memory the copies return once the bytes are staged, so the buffers may change.
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(pool_.data() + (slot - 1) * slot_stride_, staging_.data(),
                                 slot_stride_ * sizeof(bf16), cudaMemcpyHostToDevice, stream),
                 "LoRA adapter upload"));
  return CudaStatus(cudaMemcpyAsync(ranks_.data() + (slot - 1) * ranks.size(), ranks.data(),
                                    ranks.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream),
                    "LoRA rank upload");
}

absl::Status CudaLoraPool::Prepare(const StepLoras& step, cudaStream_t stream) {
  const int64_t words =
      static_cast<int64_t>(step.groups.size() * sizeof(LoraTokenGroup) / sizeof(int32_t));
  if (words > groups_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a step of ", step.groups.size(), " LoRA token groups exceeds the CUDA pool's ",
        groups_.size() * sizeof(int32_t) / sizeof(LoraTokenGroup)));
  }
  for (size_t g = 0; g < step.groups.size(); ++g) {
    const int32_t slot = step.groups[g].slot;
    if (slot < 1 || slot > static_cast<int32_t>(resident_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("LoRA slot ", slot, " is outside [1, ", resident_.size(), "]"));
    }
    if (resident_[slot - 1] == step.shards[g]) continue;
    RETURN_IF_ERROR(Upload(slot, *step.shards[g], stream));
    resident_[slot - 1] = step.shards[g];
  }
  num_groups_ = static_cast<int64_t>(step.groups.size());
  if (num_groups_ == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(groups_.data(), step.groups.data(), words * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, stream),
                    "LoRA group upload");
}

void CudaLoraPool::Apply(int layer, std::initializer_list<LoraTarget> targets, const bf16* x,
                         int64_t x_stride, bf16* y, int64_t y_stride, cudaStream_t stream) {
  if (num_groups_ == 0) return;
  for (LoraTarget target : targets) {
    const int t = static_cast<int>(target);
    const Module& m = modules_[t];
    const bf16* layer_base = pool_.data() + layer * layer_stride_;
    LoraProductParams p;
    p.groups = groups_.data();
    p.num_groups = num_groups_;
    p.a = layer_base + m.a;
    p.bt = layer_base + m.bt;
    p.slot_stride = slot_stride_;
    p.ranks = ranks_.data() + layer * kNumLoraTargets + t;
    p.rank_stride = num_layers_ * kNumLoraTargets;
    p.max_rank = max_rank_;
    p.in = m.in;
    p.out = m.out;
    p.x = x;
    p.x_stride = x_stride;
    p.y = y + m.offset;
    p.y_stride = y_stride;
    p.scratch = scratch_.data();
    LoraProduct(p, stream);
  }
}

}  // namespace tpserve::cuda
