#include "worker/lora_shard.h"

#include <utility>

#include "kernels/cpu/lora_product.h"

namespace tpserve {
namespace {

// Bᵀ of B's rows [rows.begin, rows.end()).
std::vector<float> Transposed(const std::vector<float>& b, int64_t rank, Range rows) {
  std::vector<float> bt(rank * rows.size);
  for (int64_t j = 0; j < rows.size; ++j) {
    for (int64_t k = 0; k < rank; ++k) bt[k * rows.size + j] = b[(rows.begin + j) * rank + k];
  }
  return bt;
}

// Rows [rows.begin, rows.end()) of B, all of A: a column-parallel module.
LoraSlice OutputRows(LoraTarget target, const LoraModule& m, int64_t rank, Range rows,
                     int64_t offset) {
  return LoraSlice{target, rank, m.in, rows.size, offset, m.a, Transposed(m.b, rank, rows)};
}

// Columns [cols.begin, cols.end()) of A, all of B: a row-parallel module.
LoraSlice InputColumns(LoraTarget target, const LoraModule& m, int64_t rank, Range cols) {
  LoraSlice s{target, rank, cols.size, m.out, 0, {}, Transposed(m.b, rank, Range{0, m.out})};
  s.a.resize(rank * cols.size);
  for (int64_t k = 0; k < rank; ++k) {
    std::copy(m.a.begin() + k * m.in + cols.begin, m.a.begin() + k * m.in + cols.end(),
              s.a.begin() + k * cols.size);
  }
  return s;
}

int64_t Bytes(const std::vector<LoraSlice>& slices) {
  int64_t bytes = 0;
  for (const LoraSlice& s : slices) bytes += static_cast<int64_t>((s.a.size() + s.bt.size()) * 4);
  return bytes;
}

}  // namespace

LoraShard ShardLora(const LoraAdapter& adapter, const ModelConfig& config,
                    const ShardLayout& layout) {
  const int64_t hd = config.head_dim;
  const int64_t r = adapter.rank;
  const int64_t q_width = layout.q_width(hd);
  const int64_t kv_width = layout.kv_width(hd);
  const Range q_rows{layout.q_heads.begin * hd, q_width};
  const Range kv_rows{layout.kv_heads.begin * hd, kv_width};
  LoraShard shard;
  for (int64_t l = 0; l < layout.layers.size; ++l) {
    const auto& modules = adapter.layers[layout.layers.begin + l];
    auto module = [&modules](LoraTarget t) -> const std::optional<LoraModule>& {
      return modules[static_cast<int>(t)];
    };
    LoraLayerShard layer;
    using T = LoraTarget;
    if (const auto& m = module(T::kQ)) layer.qkv.push_back(OutputRows(T::kQ, *m, r, q_rows, 0));
    if (const auto& m = module(T::kK)) {
      layer.qkv.push_back(OutputRows(T::kK, *m, r, kv_rows, q_width));
    }
    if (const auto& m = module(T::kV)) {
      layer.qkv.push_back(OutputRows(T::kV, *m, r, kv_rows, q_width + kv_width));
    }
    if (const auto& m = module(T::kO)) layer.o.push_back(InputColumns(T::kO, *m, r, q_rows));
    if (const auto& m = module(T::kGate)) {
      layer.gate_up.push_back(OutputRows(T::kGate, *m, r, layout.ffn, 0));
    }
    if (const auto& m = module(T::kUp)) {
      layer.gate_up.push_back(OutputRows(T::kUp, *m, r, layout.ffn, layout.ffn.size));
    }
    if (const auto& m = module(T::kDown)) {
      layer.down.push_back(InputColumns(T::kDown, *m, r, layout.ffn));
    }
    shard.bytes += Bytes(layer.qkv) + Bytes(layer.o) + Bytes(layer.gate_up) + Bytes(layer.down);
    shard.layers.push_back(std::move(layer));
  }
  return shard;
}

void ApplyLora(const LoraSlice& s, const float* const* x, float* const* y, int64_t tokens) {
  float* out[cpu::kMaxLoraProductTokens];
  for (int64_t t = 0; t < tokens; ++t) out[t] = y[t] + s.offset;
  cpu::LoraProduct(s.a.data(), s.bt.data(), s.rank, s.in, s.out, x, out, tokens);
}

void LoraTable::Set(int32_t slot, std::shared_ptr<const LoraShard> shard) {
  absl::MutexLock lock(&mutex_);
  if (slot >= 1 && slot < static_cast<int32_t>(slots_.size())) slots_[slot] = std::move(shard);
}

std::shared_ptr<const LoraShard> LoraTable::Get(int32_t slot) const {
  absl::MutexLock lock(&mutex_);
  if (slot < 1 || slot >= static_cast<int32_t>(slots_.size())) return nullptr;
  return slots_[slot];
}

}  // namespace tpserve
