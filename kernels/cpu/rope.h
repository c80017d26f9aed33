// Rotary position embedding (RoPE) applied in place to Q or K (fp32, CPU).
#pragma once

#include <cstdint>

namespace tpserve::cpu {

// Which elements of a head form the rotated pairs. Pair i (i in [0, rope_dims / 2)) is rotated by
// the angle  pos * inv_freq[i]  (theta_base^(-2i / rope_dims) unscaled; the model's RoPE scaling
// decides the table, see model/rope_frequencies.h).
enum class RopeStyle {
  // Pairs (x[2i], x[2i + 1]): ggml's "normal" mode, the layout of Q/K rows in GGUF Llama files
  // (llama.cpp's converter permutes the HF rows into it).
  kAdjacentPairs,
  // Pairs (x[i], x[i + rope_dims / 2]): GPT-NeoX / Hugging Face `rotate_half`, the layout of
  // HF safetensors checkpoints.
  kRotateHalf,
};

// Rotates every head of every token in place:
//   (x0, x1) -> (x0 cos(a) - x1 sin(a),  x0 sin(a) + x1 cos(a)),  a = positions[t] * inv_freq[i].
// Angles and their cos/sin are computed in double and rounded to fp32 once, so large positions
// lose no precision (ggml accumulates the angle in fp32 instead).
//   x:         [num_tokens, num_heads, head_dim], contiguous
//   positions: [num_tokens], absolute position of each token in its sequence (>= 0)
//   rope_dims: number of leading dims of each head that are rotated; even, in (0, head_dim].
//              Dims [rope_dims, head_dim) are left untouched (partial rotary).
//   inv_freq:  [rope_dims / 2], finite, the angle per position of each pair.
// Apply it to Q (num_heads) and to K (num_kv_heads) with separate calls.
void ApplyRope(float* x, const int32_t* positions, int64_t num_tokens, int64_t num_heads,
               int64_t head_dim, int64_t rope_dims, const double* inv_freq, RopeStyle style);

}  // namespace tpserve::cpu
