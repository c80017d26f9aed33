// LoadShardWeights over an FP8 checkpoint (tests/unit/worker/fp8_checkpoint_view.h): a CUDA rank
// keeps each projection's E4M3 codes and row scales exactly as the checkpoint holds them, for its
// own rows (column-parallel) or columns (row-parallel); a CPU rank gets the same weights decoded,
// each value code * scale. Checked element by element against the view's tensors, at tp 1 and 2,
// with per-channel and per-tensor scales.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/fp8_e4m3.h"
#include "model/gguf_file.h"
#include "model/model_config.h"
#include "model/shard_layout.h"
#include "model/synthetic_model.h"
#include "tests/unit/worker/fp8_checkpoint_view.h"
#include "worker/shard_loader.h"

namespace tpserve {
namespace {

class ShardLoaderFp8Test : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    SyntheticModelSpec spec;
    spec.layers = 2;
    spec.hidden = 64;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.ffn = 96;
    spec.vocab = 300;
    path_ = (std::filesystem::temp_directory_path() /
             ("tpserve-fp8-view-" + std::to_string(::getpid()) + ".gguf"))
                .string();
    ASSERT_TRUE(WriteSyntheticModel(spec, path_).ok());
    auto file = GgufFile::Open(path_);
    ASSERT_TRUE(file.ok()) << file.status();
    file_ = *std::move(file);
    // Per channel, the embedding is FP8 too: every rank must decode it all the same.
    auto view = testing::Fp8CheckpointView(*file_, /*per_channel=*/GetParam(),
                                           /*fp8_embedding=*/GetParam());
    ASSERT_TRUE(view.ok()) << view.status();
    view_ = *std::move(view);
    auto config = ModelConfig::FromGguf(*view_);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
  }
  void TearDown() override { std::filesystem::remove(path_); }

  // Row r's codes, columns [c0, c0 + n), and scale, of the view's tensor `name`.
  std::vector<uint8_t> Codes(const std::string& name, int64_t r, int64_t c0, int64_t n) const {
    const GgufTensorInfo* t = view_->FindTensor(name);
    const auto data = view_->TensorData(*t).subspan(r * t->dims[0] + c0, n);
    return {data.begin(), data.end()};
  }
  float Scale(const std::string& name, int64_t r) const {
    const GgufTensorInfo* t = view_->FindTensor(name);
    return t->row_scales.size() == 1 ? t->row_scales[0] : t->row_scales[r];
  }

  // `w`'s row `row` (codes or decoded values) against the view's `name` row `r`, columns c0...
  void ExpectRow(const Linear& w, int64_t row, const std::string& name, int64_t r, int64_t c0) {
    const std::vector<uint8_t> codes = Codes(name, r, c0, w.cols);
    const float scale = Scale(name, r);
    if (w.type == GgmlType::kF8E4M3) {
      ASSERT_EQ(
          std::vector<uint8_t>(w.fp8.begin() + row * w.cols, w.fp8.begin() + (row + 1) * w.cols),
          codes)
          << name << " row " << r;
      ASSERT_EQ(w.fp8_scales[row], scale) << name << " row " << r;
      return;
    }
    ASSERT_EQ(w.type, GgmlType::kF32);
    for (int64_t c = 0; c < w.cols; ++c) {
      ASSERT_EQ(w.values[row * w.cols + c], cpu::FromE4m3(codes[c]) * scale)
          << name << " row " << r << " column " << c0 + c;
    }
  }

  std::string path_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<GgufFile> view_;
  ModelConfig config_;
};

TEST_P(ShardLoaderFp8Test, RanksKeepOrDecodeTheirSlices) {
  const int64_t hd = config_.head_dim;
  for (const int world : {1, 2}) {
    for (int rank = 0; rank < world; ++rank) {
      auto layout = ShardLayout::Make(config_, rank, world);
      ASSERT_TRUE(layout.ok()) << layout.status();
      for (const bool keep : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << "rank " << rank << "/" << world << (keep ? " codes" : " decoded"));
        auto weights =
            LoadShardWeights(*view_, config_, *layout, ShardFormats{CpuWeights::kPacked, keep});
        ASSERT_TRUE(weights.ok()) << weights.status();
        const LayerWeights& l = weights->layers[1];
        ASSERT_EQ(l.qkv.type, keep ? GgmlType::kF8E4M3 : GgmlType::kF32);
        // qkv: this rank's q rows, then its k rows, then its v rows.
        int64_t row = 0;
        for (const auto& [name, heads] : {std::pair{"blk.1.attn_q.weight", layout->q_heads},
                                          std::pair{"blk.1.attn_k.weight", layout->kv_heads},
                                          std::pair{"blk.1.attn_v.weight", layout->kv_heads}}) {
          for (int64_t r = heads.begin * hd; r < heads.end() * hd; ++r, ++row) {
            ExpectRow(l.qkv, row, name, r, 0);
          }
        }
        EXPECT_EQ(row, l.qkv.rows);
        // gate_up: this rank's gate rows, then its up rows; down: its columns of every row.
        for (int64_t r = 0; r < layout->ffn.size; ++r) {
          ExpectRow(l.gate_up, r, "blk.1.ffn_gate.weight", layout->ffn.begin + r, 0);
          ExpectRow(l.gate_up, layout->ffn.size + r, "blk.1.ffn_up.weight", layout->ffn.begin + r,
                    0);
        }
        for (int64_t r = 0; r < config_.hidden_size; ++r) {
          ExpectRow(l.down, r, "blk.1.ffn_down.weight", r, layout->ffn.begin);
          ExpectRow(l.attn_output, r, "blk.1.attn_output.weight", r, layout->q_heads.begin * hd);
        }
        // The embedding is no FP8 product: decoded on every rank, FP8 in the file or not.
        const Linear& embedding = weights->token_embedding;
        ASSERT_EQ(embedding.type, GgmlType::kF32);
        if (GetParam()) {
          for (int64_t r = 0; r < config_.vocab_size; r += 37) {
            ExpectRow(embedding, r, "token_embd.weight", r, 0);
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Scales, ShardLoaderFp8Test, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("PerChannel") : std::string("PerTensor");
                         });

}  // namespace
}  // namespace tpserve
