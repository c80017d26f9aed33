// How a CPU rank holds and multiplies the linear weights a GGUF file keeps in blocks (Q4_0, Q4_1,
// Q8_0, Q4_K, Q5_K, Q6_K): the --cpu-weights flag of tpserve, tpserve-worker and
// tpserve-calibrate-kv.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_config.h"

namespace tpserve {

// kPacked: the blocks' own bytes, rearranged (cpu::PackedWeight), multiplied with activations
// rounded to 8 bits per block, as llama.cpp's CPU backend computes. kPacked16: the same weights,
// activations rounded to 16 bits per block (two 8-bit halves, twice the integer work): on
// SmolLM2-135M as exact as fp32 to within 1e-7 of top-20 KL, where 8 bits lose the quickstart's
// answer. kFp32: decoded to fp32 at load and multiplied in fp32 (SGEMM), at 4-8x the memory and a
// fraction of the speed. kAuto: ResolveCpuWeights.
enum class CpuWeights { kAuto, kPacked, kPacked16, kFp32 };

// "auto", "packed", "packed-a16", "fp32": the flag's values, in the enum's order.
const std::vector<std::string>& CpuWeightsNames();
std::optional<CpuWeights> ParseCpuWeights(std::string_view name);
const char* CpuWeightsName(CpuWeights weights);

// Models below this many parameters run kPacked16 under kAuto. Small models are the ones 8-bit
// activations cost the most (a narrow hidden state has few blocks to average the rounding over)
// and the doubled product the least: SmolLM2-135M at 16 bits still serves at 1.7-2.0x
// llama.cpp's speed, while at 1B and above the products bound the throughput of a busy server
// and 8 bits keep llama.cpp's numerics (docs/PERFORMANCE.md).
inline constexpr int64_t kAutoPacked16MaxParameters = 1'000'000'000;

// The weights' parameter count: embedding, output head (unless tied), and every layer's linears.
int64_t ParameterCount(const ModelConfig& config);

// `asked`, or for kAuto what it picks for `config`.
CpuWeights ResolveCpuWeights(CpuWeights asked, const ModelConfig& config);

}  // namespace tpserve
