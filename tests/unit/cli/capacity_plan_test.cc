// PlanCapacity against tables worked out by hand from the published shapes (Llama-3-70B: 80
// layers, hidden 8192, 64 heads over 8 KV heads, MLP 28672, vocabulary 128256; Llama-3-8B: 32,
// 4096, 32 over 8, 14336, 128256) on H200s taken as 140 GiB, 90% usable, 1 GiB of overhead,
// 4.8 TB/s, NVLink 450 GB/s with 10 µs all-reduce latency, a 50 GB/s network with 25 µs.
//
// Llama-3-70B at TP 8, rank 0: 8 query heads and 1 KV head (q 1024 rows, k and v 128 each),
// MLP 3584, vocabulary 16032. bf16 bytes per layer: qkv 1280·8192·2 = 20,971,520, o
// 8192·1024·2 = 16,777,216, gate+up 2·3584·8192·2 = 117,440,512, down 58,720,256, two norms
// 32,768: 213,942,272; 80 layers 17,115,381,760; + embedding 2,101,346,304 + lm_head rows
// 16032·8192·2 = 262,668,288 + final norm 16,384 = 19,479,412,736. KV per token 2·80·128·2 =
// 40,960. Memory left: 126 GiB − weights − 1 GiB = 114,738,315,264 B = 175,076 blocks of 16
// (655,360 B each) = 2,801,216 tokens = 341 sequences of 8192. A token reads the layers, the
// lm_head rows, one embedding row and 8192·40,960 of KV: 17,713,610,752 B = 3.6903 ms; 160
// all-reduces of 16,384 B, each 10 µs + 1.75·16,384 / 450e9 s: 1.6102 ms.
#include "cli/capacity_plan.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/hf_folder.h"

namespace tpserve {
namespace {

ModelConfig Llama3(int64_t layers, int64_t hidden, int64_t heads, int64_t ffn) {
  ModelConfig c;
  c.architecture = "llama";
  c.num_layers = layers;
  c.hidden_size = hidden;
  c.num_heads = heads;
  c.num_kv_heads = 8;
  c.head_dim = hidden / heads;
  c.intermediate_size = ffn;
  c.vocab_size = 128256;
  c.context_length = 8192;
  return c;
}

PlanHardware H200(int tp) {
  PlanHardware hw;
  hw.tp = tp;
  hw.gpu_memory_gib = 140;
  hw.hbm_tb_per_s = 4.8;
  return hw;
}

TEST(PlanCapacity, Llama3_70bBf16AtTp8) {
  auto r =
      PlanCapacity(Llama3(80, 8192, 64, 28672), PlanDtype::kBf16, PlanDtype::kBf16, H200(8), 8192);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params, 70'553'706'496);
  EXPECT_EQ(r->rank_weight_bytes, 19'479'412'736);
  EXPECT_EQ(r->kv_bytes_per_token, 40'960);
  EXPECT_EQ(r->kv_blocks, 175'076);
  EXPECT_EQ(r->kv_tokens, 2'801'216);
  EXPECT_EQ(r->sequences, 341);
  EXPECT_EQ(r->decode_read_bytes, 17'713'610'752);
  EXPECT_NEAR(r->decode_ms, 3.6903, 1e-4);
  EXPECT_NEAR(r->allreduce_ms, 1.6102, 1e-4);
  EXPECT_EQ(r->nodes, 1);
}

// FP8: each linear weight a byte plus an fp32 scale per output row. Per layer: qkv
// 1280·8192 + 1280·4 = 10,490,880, o 8,388,608 + 32,768, gate+up 2·(29,360,128 + 14,336), down
// 29,360,128 + 32,768, norms 32,768: 107,086,848; ·80 = 8,566,947,840; + embedding, lm_head
// rows and final norm as bf16: 10,930,978,816. KV 20,480 a token: 123,286,749,184 B left =
// 376,241 blocks = 6,019,856 tokens = 734 sequences of 8192.
TEST(PlanCapacity, Llama3_70bFp8WeightsAndKvAtTp8) {
  auto r =
      PlanCapacity(Llama3(80, 8192, 64, 28672), PlanDtype::kFp8, PlanDtype::kFp8, H200(8), 8192);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rank_weight_bytes, 10'930'978'816);
  EXPECT_EQ(r->kv_bytes_per_token, 20'480);
  EXPECT_EQ(r->kv_blocks, 376'241);
  EXPECT_EQ(r->kv_tokens, 6'019'856);
  EXPECT_EQ(r->sequences, 734);
}

// TP 16 over two nodes: 4 query heads, the KV head replicated (16 > 8 KV heads), MLP 1792,
// vocabulary 8016. Per layer 768·8192·2 + 8192·512·2 + 2·1792·8192·2 + 8192·1792·2 + 32,768 =
// 109,084,672; ·80 = 8,726,773,760; + 2,101,346,304 + 8016·8192·2 + 16,384 = 10,959,470,592.
// KV stays 40,960 a token: 123,258,257,408 B = 188,077 blocks = 3,009,232 tokens = 367
// sequences. The all-reduces cross the network: 160·(25 µs + 1.875·16,384 / 50e9 s) = 4.0983 ms;
// a token reads 9,193,668,608 B = 1.9153 ms.
TEST(PlanCapacity, Llama3_70bBf16AtTp16OnTwoNodes) {
  auto r =
      PlanCapacity(Llama3(80, 8192, 64, 28672), PlanDtype::kBf16, PlanDtype::kBf16, H200(16), 8192);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rank_weight_bytes, 10'959'470'592);
  EXPECT_EQ(r->kv_bytes_per_token, 40'960);
  EXPECT_EQ(r->kv_blocks, 188'077);
  EXPECT_EQ(r->sequences, 367);
  EXPECT_EQ(r->nodes, 2);
  EXPECT_NEAR(r->allreduce_ms, 4.0983, 1e-4);
  EXPECT_NEAR(r->decode_ms, 1.9153, 1e-4);
}

// Llama-3-8B on one GPU: 8,030,261,248 parameters; per layer (25,165,824 + 16,777,216 +
// 176,160,768)·2 + 16,384 = 436,224,000; ·32 + embedding and lm_head 1,050,673,152 each + 8,192
// = 16,060,522,496 B. KV 2·32·1024·2 = 131,072 a token: 118,157,205,504 B = 56,341 blocks =
// 901,456 tokens = 110 sequences of 8192; a token reads 16,083,591,168 B = 3.3507 ms; no
// all-reduce.
TEST(PlanCapacity, Llama3_8bOnOneGpu) {
  auto r =
      PlanCapacity(Llama3(32, 4096, 32, 14336), PlanDtype::kBf16, PlanDtype::kBf16, H200(1), 8192);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params, 8'030'261'248);
  EXPECT_EQ(r->rank_weight_bytes, 16'060'522'496);
  EXPECT_EQ(r->kv_blocks, 56'341);
  EXPECT_EQ(r->kv_tokens, 901'456);
  EXPECT_EQ(r->sequences, 110);
  EXPECT_NEAR(r->decode_ms, 3.3507, 1e-4);
  EXPECT_EQ(r->allreduce_ms, 0);
}

// Llama-3-70B bf16 at TP 8 × PP 2 on two nodes of 8 H100s (79.65 GiB, 90% usable, 1 GiB of
// overhead, 3.35 TB/s). Each stage holds 40 layers of the TP 8 layer above (213,942,272 B):
// 8,557,690,880 B. Stage 0 adds the embedding (2,101,346,304): 10,659,037,184 B; stage 1 its
// lm_head rows (262,668,288) and the final norm (16,384): 8,820,375,552 B. KV 2·40·128·2 = 20,480
// B a token on each. Memory left: 76,993,812,070.4 − weights − 1,073,741,824 = 65,238,403,645.44
// B on stage 0 = 199,091 blocks of 327,680 B; 67,077,065,277.44 B on stage 1 = 204,702 blocks.
// The pool is the smaller: 199,091 blocks = 3,185,456 tokens = 388 sequences of 8192. A token
// reads 40 layers, one embedding row and 8192·20,480 of KV on stage 0 (8,725,479,424 B) and 40
// layers, the lm_head rows and the KV on stage 1 (8,988,131,328 B): 17,713,610,752 B = 5.2876 ms
// at 3.35 TB/s. Each stage's 80 all-reduces stay on its node's NVLink: 2 · 0.80510 = 1.6102 ms.
// One hop between the stages over the network: 25 µs + 16,384 / 50e9 s = 0.025328 ms. Against
// TP 16 over the same two nodes, whose 160 all-reduces cross the network (4.0983 ms above).
TEST(PlanCapacity, Llama3_70bBf16AtTp8Pp2OnTwoH100Nodes) {
  PlanHardware hw;
  hw.tp = 8;
  hw.pp = 2;
  hw.gpu_memory_gib = 79.65;
  hw.hbm_tb_per_s = 3.35;
  auto r = PlanCapacity(Llama3(80, 8192, 64, 28672), PlanDtype::kBf16, PlanDtype::kBf16, hw, 8192);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->stages.size(), 2u);
  EXPECT_EQ(r->stages[0].first_layer, 0);
  EXPECT_EQ(r->stages[0].layers, 40);
  EXPECT_EQ(r->stages[1].first_layer, 40);
  EXPECT_EQ(r->stages[0].rank_weight_bytes, 10'659'037'184);
  EXPECT_EQ(r->stages[1].rank_weight_bytes, 8'820'375'552);
  EXPECT_EQ(r->stages[0].kv_bytes_per_token, 20'480);
  EXPECT_EQ(r->stages[0].kv_blocks, 199'091);
  EXPECT_EQ(r->stages[1].kv_blocks, 204'702);
  EXPECT_EQ(r->stages[0].decode_read_bytes, 8'725'479'424);
  EXPECT_EQ(r->stages[1].decode_read_bytes, 8'988'131'328);
  EXPECT_EQ(r->rank_weight_bytes, 10'659'037'184);
  EXPECT_EQ(r->kv_blocks, 199'091);
  EXPECT_EQ(r->kv_tokens, 3'185'456);
  EXPECT_EQ(r->sequences, 388);
  EXPECT_EQ(r->nodes, 2);
  EXPECT_NEAR(r->decode_ms, 5.2876, 1e-4);
  EXPECT_NEAR(r->stages[0].allreduce_ms, 0.80510, 1e-5);
  EXPECT_NEAR(r->allreduce_ms, 1.6102, 1e-4);
  EXPECT_NEAR(r->p2p_ms, 0.025328, 1e-6);
}

TEST(PlanCapacity, SaysWhatDoesNotFit) {
  PlanHardware small = H200(1);
  small.gpu_memory_gib = 80;
  auto r =
      PlanCapacity(Llama3(80, 8192, 64, 28672), PlanDtype::kBf16, PlanDtype::kBf16, small, 8192);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kv_tokens, 0);
  EXPECT_NE(r->warning.find("do not fit"), std::string::npos);
  auto bad =
      PlanCapacity(Llama3(80, 8192, 64, 28672), PlanDtype::kBf16, PlanDtype::kBf16, H200(3), 8192);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--tp"), std::string::npos) << bad.status();
  PlanHardware stages = H200(8);
  stages.pp = 81;
  bad = PlanCapacity(Llama3(80, 8192, 64, 28672), PlanDtype::kBf16, PlanDtype::kBf16, stages, 8192);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--pp: between 1 and the model's 80 layers");
}

// The planner reads a folder's config.json as the folder loader does (model/hf_folder.h).
TEST(HfFolderShape, ReadsTheShapeFromConfigJsonAlone) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("tpserve-plan-shape-", getpid());
  std::filesystem::create_directories(dir);
  auto write = [&dir](const std::string& text) { std::ofstream(dir / "config.json") << text; };
  write(R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32,
      "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
      "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
      "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": false})");
  auto c = HfFolderShape(dir.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->context_length, 131072);
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_FALSE(c->tie_word_embeddings);
  write(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096})");
  auto missing = HfFolderShape(dir.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("num_hidden_layers"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tpserve
